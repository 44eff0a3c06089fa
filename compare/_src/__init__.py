"""The harness's engine, private: what `compare`'s public names are built on.

Three packages, each importing only those before it: `measure` (a compiled
step's collectives, memory and throughput), `prove` (the runs, the lockstep
checks, the verdicts and their tolerances, and how they are shown) and
`rewrite` (`python -m compare.rewrite`, which proves what it writes with
`prove`). Beside them, `cli` (`python -m compare`) and `show_diff`. Nothing
here is a promise: teams use what `compare.__all__` names (optax keeps its
`_src` the same way).
"""
