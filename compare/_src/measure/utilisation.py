"""How close a run comes to what the machine can do: FLOPs against a peak.

`flops_per_step` comes from the compiled program's cost analysis, for the
whole global step: a partitioned program's analysis covers one device's
share, so it is multiplied by the devices it runs on. `peak_gflops` is a
brief f32 matmul probe on one device, measured in the same invocation.
"""

import time

import jax
import jax.numpy as jnp


def flops(compiled, n_devices: int) -> float | None:
  """FLOPs of one call of `compiled` over all `n_devices` it runs on."""
  try:
    analysis = compiled.cost_analysis()
  except Exception:  # pylint: disable=broad-except  # not every backend has it
    return None
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else {}
  value = (analysis or {}).get("flops")
  return None if value is None else float(value) * n_devices


def peak_gflops(size: int = 1024, repeats: int = 5) -> float:
  """The best f32 matmul rate of one device over a few timed products.

  On emulated CPU devices every device shares the host's cores, and one
  device's matmul already uses them all: this is the machine's peak.
  """
  a = jnp.ones((size, size), jnp.float32)
  matmul = jax.jit(lambda x: x @ x)
  matmul(a).block_until_ready()  # compile and warm up, untimed
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * size**3 / best / 1e9


def achieved(flops_per_step: float | None, examples_per_s: float | None,
             global_batch: int) -> float | None:
  """GFLOP/s achieved at the measured throughput."""
  if flops_per_step is None or not examples_per_s:
    return None
  return flops_per_step * examples_per_s / global_batch / 1e9
