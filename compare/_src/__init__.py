"""The harness's engine, private: what `compare`'s public names are built on.

The runner and its lockstep checks, the verdicts and their tolerances, the
measurements (timing, HLO, utilisation), the presentation (CLI, report,
plots) and the catalogue of our own strategies. Nothing here is a promise:
teams use what `compare.__all__` names (optax keeps its `_src` the same way).
"""
