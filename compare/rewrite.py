"""`python -m compare.rewrite`: a pmap program rewritten into its port.

    python -m compare.rewrite train.py -o train_port.py
    python -m compare.rewrite train.py -o train_port.py --prove my.prove:port
    python -m compare.rewrite --in-tree src/ --out-tree src_port/

Every `jax.pmap` (a call, a decorator, through `functools.partial`) becomes
`jax.jit(jax.shard_map(...))` over a 1-D mesh of the same devices, built once
per axis, keeping pmap's stacked layout so that every call site runs as it
did and the step computes pmap's numbers; comments and formatting survive
(LibCST). The report names every change and every place left to a person by
file and line, and the call sites (`replicate`, `shard`, `unreplicate`) that
the next step, the state placed once on the mesh, changes by hand. Exit 0:
all rewritten; 1: something needs a person (still written); 2: bad input.
"""

import sys

from compare._src.rewrite.pipeline import rewrite_source
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Rewrite
from compare._src.rewrite.records import RewriteError
from compare._src.rewrite.rewrite_cli import main

__all__ = ["Finding", "Rewrite", "RewriteError", "main", "rewrite_source"]

if __name__ == "__main__":
  sys.exit(main())
