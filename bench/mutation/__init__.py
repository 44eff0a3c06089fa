"""Mutation testing: the suite's strength, measured
(`python -m bench.mutation`, docs/mutation-testing.md).

- `mutate`: mutmut on the verdict's and the rewrite's modules, each in a
  scratch copy of HEAD; `python -m bench.mutation` runs it (`__main__`).
- `tally`: what a run's statuses mean: each mutant counted (caught,
  survived, unreached, equivalent by the triage) and the table printed.
- `targets`: what it mutates and the fast tests it runs.
- `triage`: the survivors' triage, read from `triage.toml` (each survivor
  judged: equivalent with the reason, or the test added for it).
"""
