"""Proves the twin backends compute the same numbers, and times them.

`python -m compare --strategy data_parallel|ensemble|accumulation`: every
strategy's runs (pmap, the shard_map and jit ports, the one-device
reference) train from the same state on the same batches; `runner` records
them, `verdicts` judges them against their tolerances and a calibration,
`timing`, `hlo` and `utilisation` measure them, `report` and `plots` show
them. The programs themselves are `training.programs`; `strategies` adds how
each is judged.
"""
