"""The probes behind docs/performance-notes.md:
`python -m bench.probes.perf.NAME`.

Each probe parses its flags and sets the emulated device count (`emulate`
of `probe_env`) before it imports jax, since XLA reads the count once;
`paired` is their interleaved wall-clock and CPU-time timer. The probes:

- `accum_jit_variants`: jit accumulation variants against the shard_map
  port (HLO, memory, speed).
- `allreduce_cost`: what one all-reduce costs on emulated CPU devices.
- `ensemble_variants`: the ensemble step's costs (barrier, stacking, one
  program or two).
- `jit_partial_sums`: the minimal reproducer of XLA:CPU all-reducing each
  microbatch's partial sums under jit.
- `utilisation_bounds`: what bounds the CNN's share of the machine's f32
  peak, in CPU time.
"""
