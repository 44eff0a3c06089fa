"""Throughput of several compiled steps, timed interleaved.

Each window times every run once, in a rotated order (A B C, B C A, ...), so
slow drifts of the machine (thermal, other processes) land on all runs alike.
Warm-up calls are excluded; each window ends with `block_until_ready`.
"""

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

import jax
from jax.experimental import multihost_utils
import numpy as np

from shardport.launch import distributed
from shardport.training import dispatch


@dataclasses.dataclass
class Timed:
  """One run to time: its step, a state it may consume, batches to cycle."""

  name: str
  step: Callable
  state: object
  batches: Sequence[object]




def _run(timed: Timed, steps: int) -> float:
  start = time.perf_counter()
  state = timed.state
  limit = dispatch.max_in_flight()
  for i in range(steps):
    state, metrics = timed.step(state, timed.batches[i % len(timed.batches)])
    if (i + 1) % limit == 0:
      jax.block_until_ready(state)
  jax.block_until_ready((state, metrics))
  timed.state = state
  return time.perf_counter() - start


def throughput(runs: Sequence[Timed], examples_per_step: int, windows: int = 20,
               window_s: float = 0.4, warmup_steps: int = 2) -> dict:
  """Examples per second of each run: median and [min, max] over windows.

  Args:
    runs: the runs; their states are consumed (donated) as they step.
    examples_per_step: global examples one step trains on.
    windows: timed windows per run.
    window_s: target length of one window, for the slowest run.
    warmup_steps: untimed steps per run before the first window.

  Returns:
    `{name: {"examples_per_s", "examples_per_s_spread", "steps_per_window",
    "windows", "window_examples_per_s"}}`; the per-window rates are in
    window order, so two runs' rates can be compared window by window.
  """
  runs = list(runs)
  for timed in runs:
    _run(timed, warmup_steps)
  slowest = max(_run(timed, 1) for timed in runs)
  steps = max(1, round(window_s / max(slowest, 1e-6)))
  if jax.process_count() > 1:
    # Every process must call the steps (and their collectives) as often:
    # process 0's choice for all.
    steps = int(multihost_utils.broadcast_one_to_all(np.int32(steps)))
  rates = {timed.name: [] for timed in runs}
  for w in range(windows):
    for timed in runs[w % len(runs):] + runs[:w % len(runs)]:
      # Many processes: each window starts together everywhere, so that a
      # run holding collectives is not timed waiting for a peer still
      # timing a run without any (the reference).
      distributed.barrier(f"window-{timed.name}")
      rates[timed.name].append(examples_per_step * steps / _run(timed, steps))
  return {name: {"examples_per_s": statistics.median(r),
                 "examples_per_s_spread": [min(r), max(r)],
                 "steps_per_window": steps, "windows": windows,
                 "window_examples_per_s": r}
          for name, r in rates.items()}


def not_timed() -> dict:
  """The throughput fields of a run that was not timed (it blew up, or
  no timing windows were asked for)."""
  return {"examples_per_s": None, "examples_per_s_spread": [None, None],
          "steps_per_window": 0, "windows": 0, "window_examples_per_s": []}
