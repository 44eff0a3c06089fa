"""Measurements, by kind: the runners behind docs/measured/, probes, real
programs, the mutation bench.

Run from the repository root as modules (`python -m bench.KIND.NAME`):
like docs/, bench is not installed; it measures a checkout. Every module
is named in its package's index (tests/test_bench_index.py holds each
index to it).

- `measure`: which command regenerates which file of docs/measured/
  (`python -m bench.measure --list` names every target and its command;
  `python -m bench.measure TARGET`, or `python -m docs.build_guide
  --measure TARGET`, runs one).
- `runners/`: the runners each target runs, each writing
  docs/measured/TARGET.json, and what they share.
- `probes/`: probes that print to stdout, for the engineering notes under
  docs/ (`perf/` among them: docs/performance-notes.md's).
- `real_programs/`: public pmap programs (flax's examples, brax's PPO),
  their mocks and ports, rewritten and run beside their originals
  (`python -m bench.real_programs.run`, the `real_programs` targets).
- `mutation/`: mutation testing of the verdict's and the rewrite's modules
  (`python -m bench.mutation`).
"""
