"""The probes behind docs/performance-notes.md: `python -m bench.perf.NAME`.

Each probe parses its flags and sets the emulated device count
(`probe_env.emulate`) before it imports jax, since XLA reads the count once;
`paired` is their interleaved wall-clock and CPU-time timer.
"""
