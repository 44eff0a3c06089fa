"""Paired, interleaved timing of several steps: wall clock and CPU time.

`compare._src.measure.timing.throughput` rotates the runs window by window and reports
wall-clock rates. On a shared 2-core machine (load average 9-19 while these
notes were written) a window's wall time is mostly other people's jobs, so
this helper also records the process's CPU time (user + system, all
threads) per window: the work the step itself made the machine do, far less
sensitive to load. Both are compared window by window (run / baseline).
"""

import resource
import statistics
import time

import jax


def _cpu():
  return time.process_time()  # CLOCK_PROCESS_CPUTIME_ID: all threads, ns


def _switches():
  usage = resource.getrusage(resource.RUSAGE_SELF)  # all threads
  return usage.ru_nvcsw, usage.ru_nivcsw


def _window(step, state, batch, steps):
  wall, cpu, (vol, invol) = time.perf_counter(), _cpu(), _switches()
  for _ in range(steps):
    state, metrics = step(state, batch)
    jax.block_until_ready(state)  # CPU collectives: one step in flight
  jax.block_until_ready((state, metrics))
  vol_end, invol_end = _switches()
  _window.switches = ((vol_end - vol) / steps, (invol_end - invol) / steps)
  return state, time.perf_counter() - wall, _cpu() - cpu


def measure(runs, windows=10, steps=None, window_s=0.4, warmup=2):
  """`runs`: {name: (step, state, batch)}; states are consumed.

  Returns {name: {"wall_ms": [...], "cpu_ms": [...], "voluntary": [...],
  "involuntary": [...]}} per step, per window, in window order (rotated
  A B C, B C A, ...); the last two are the process's context switches.
  """
  names = list(runs)
  states = {n: runs[n][1] for n in names}
  for n in names:
    states[n], _, _ = _window(runs[n][0], states[n], runs[n][2], warmup)
  if steps is None:
    slowest = 0.0
    for n in names:
      states[n], wall, _ = _window(runs[n][0], states[n], runs[n][2], 1)
      slowest = max(slowest, wall)
    steps = max(1, round(window_s / max(slowest, 1e-6)))
  out = {n: {"wall_ms": [], "cpu_ms": [], "voluntary": [], "involuntary": [],
             "steps": steps} for n in names}
  for w in range(windows):
    for n in names[w % len(names):] + names[:w % len(names)]:
      states[n], wall, cpu = _window(runs[n][0], states[n], runs[n][2], steps)
      out[n]["wall_ms"].append(1e3 * wall / steps)
      out[n]["cpu_ms"].append(1e3 * cpu / steps)
      out[n]["voluntary"].append(_window.switches[0])
      out[n]["involuntary"].append(_window.switches[1])
  return out


def ratios(result, run, baseline, key):
  """Per-window `baseline time / run time` (a speed ratio: > 1 is faster)."""
  return [b / r for r, b in zip(result[run][key], result[baseline][key])]


def summary(values):
  """`median (q1-q3)` of a list."""
  if len(values) < 2:
    return f"{values[0]:.3f}" if values else "-"
  q = statistics.quantiles(values, n=4)
  return f"{statistics.median(values):.3f} ({q[0]:.3f}-{q[2]:.3f})"
