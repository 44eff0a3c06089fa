"""Probes: each prints to stdout, for the engineering notes under docs/
(`python -m bench.probes.NAME`); none writes docs/measured/.

- `accumulation`: the microbatch loops (docs/accumulation-notes.md).
- `ensemble`: the ensemble step four ways (docs/ensemble-notes.md).
- `rewrite_many_hosts`: the multi-host inputs rewritten and run in
  processes joined by jax.distributed, with two plants.
- `emulated_cpu_runs`: programs that queue steps unread, run again and
  again on emulated CPU devices, with XLA's CPU pool as it starts and with
  two threads per device (the table of docs/REWRITE.md's CPU wait).
- `perf/`: the probes of docs/performance-notes.md (its own index).
"""
