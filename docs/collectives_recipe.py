"""Which collective costs in your own step: a recipe with jax's own tools.

Region `count-collectives`: compile the step on its real arguments, read
the optimised HLO (`compiled.as_text()`), and list every collective with
the bytes of its result, largest first. Run it on the pmap step and on the
port: the port should run the collectives pmap runs, no more
([the guide's 3.8 and 3.9](MIGRATION.md#reshard)); a collective only the
port runs, or one moving more bytes, is the one to look at.

`tests/test_more_idioms.py` runs it on a pmap step and its port (the same
all-reduce, the same bytes) and on a port that leaves its batch replicated
and gathers it (an all-gather the pmap step does not run).
"""

# region: count-collectives
import re

import numpy as np

_OP = re.compile(r"= (\w+)\[([\d,]*)\][^=]*? (all-reduce|all-gather|"
                 r"reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "f64": 8,
          "s64": 8, "pred": 1, "s8": 1, "u8": 1}


def collectives(step, *args):
  """`[(op, dtype[shape], bytes)]` of one compiled call, largest first."""
  text = step.lower(*args).compile().as_text()
  found = []
  for dtype, shape, op in _OP.findall(text):
    dims = [int(d) for d in shape.split(",") if d]
    found.append((op, f"{dtype}[{shape}]",
                  int(np.prod(dims)) * _BYTES.get(dtype, 4)))
  return sorted(found, key=lambda c: -c[2])
# endregion
