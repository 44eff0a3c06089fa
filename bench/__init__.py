"""Measurements: the runners behind docs/measured/, probes, real programs,
the mutation bench.

Run from the repository root as modules (`python -m bench.NAME`): like
docs/, bench is not installed; it measures a checkout. Every module is
named here, by kind (tests/test_bench_index.py holds the index to it).

Runners (each writes docs/measured/TARGET.json; `python -m bench.measure
--list` names every target and its command, `python -m bench.measure
TARGET` or `python -m docs.build_guide --measure TARGET` runs one):

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
  `rewrite_global_flax` adds flax's examples (given a checkout), and
  `rewrite_written` is the row of a written file both make.
- `measure`: which command regenerates which file; `run_record`: what
  the runners share (running a command, the record).

Probes (print to stdout, for the engineering notes under docs/):

- `accumulation`: the microbatch loops (docs/accumulation-notes.md).
- `ensemble`: the ensemble step four ways (docs/ensemble-notes.md).
- `rewrite_many_hosts`: the multi-host inputs rewritten and run in
  processes joined by jax.distributed, with two plants.
- `emulated_cpu_runs`: programs that queue steps unread, run again and
  again on emulated CPU devices, with XLA's CPU pool as it starts and with
  two threads per device (the table of docs/REWRITE.md's CPU wait).
- `perf/`: the probes of docs/performance-notes.md (its own index).

Real programs: `real_programs/` (its own index): public pmap programs
(flax's examples, brax's PPO) rewritten and run beside their originals
(`python -m bench.real_programs.run`, the `real_programs` targets).

Mutation testing: `mutation` (mutmut on the verdict's and the rewrite's
modules), `mutation_targets` (what it mutates and the tests it runs),
`mutation_triage` (the survivors' triage, `mutation_triage.toml`).
"""
