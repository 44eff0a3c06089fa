"""Measurements: the runners behind docs/measured/ and the performance probes.

Run from the repository root as modules (`python -m bench.NAME`): like
docs/, bench is not installed; it measures a checkout.

Runners (each writes one docs/measured/NAME.json; `python -m
docs.build_guide --measure TARGET` runs them through `bench.measure`):

- `verdict_runs`: the long runs that pin the calibrated verdict.
- `handover_runs`: a running job moved between the backends.
- `many_hosts_runs`: 2 processes x 4 devices against 1 x 8.
- `sweep_runs`: each strategy on 1, 2, 4 and 8 devices, with curves.
- `ensemble_runs`: the ensemble port against pmap over repeated runs.
- `dispatch`: time per call of a small step under pmap, jit(shard_map), jit.
- `run_record`: what the runners share (running a command, the record).
- `measure`: `--measure TARGET`: which command regenerates which file.

Probes (print to stdout, for the engineering notes under docs/):

- `accumulation`: the microbatch loops (docs/accumulation-notes.md).
- `ensemble`: the ensemble step four ways (docs/ensemble-notes.md).
- `perf/`: the probes of docs/performance-notes.md.
"""
