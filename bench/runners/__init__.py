"""The runners behind docs/measured/: each writes TARGET.json for a target
of `bench.measure` (`python -m bench.measure --list`), run as
`python -m bench.measure TARGET`.

- `verdict_runs`: the long runs that pin the calibrated verdict.
- `verdict_grid`: the verdict's two sides: no false failures, detection.
- `lockstep_runs`: late mistakes caught, correct ports not.
- `handover_runs`: a running job moved between the backends.
- `many_hosts_runs`: 2 processes x 4 devices against 1 x 8.
- `sweep_runs`: each strategy on 1, 2, 4 and 8 devices, with curves.
- `ensemble_runs`: the ensemble port against pmap over repeated runs.
- `dispatch`: time per call of a small step under pmap, jit(shard_map), jit.
- `jit_ports`: the jit ports before and after their fixes.
- `prove_scale`: the prover at real sizes (peak memory, copies, CPU time);
  `prove_census` is what it counts at each lockstep boundary.
- `rewrite_runs`: `compare.rewrite` on a flax-examples-style script.
- `rewrite_examples_runs`: our examples to global arrays, proved.
- `rewrite_global_runs`: `--global` on every input it writes a step for;
  `rewrite_global_flax` adds flax's examples (given a checkout), with
  `wmt_global` for examples/wmt through both steps, and `rewrite_written`
  is the row of a written file both make.
- `run_record`: what the runners share (running a command, the record).
"""
