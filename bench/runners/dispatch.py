"""Dispatch overhead: a small training step under pmap, jit(shard_map) and jit.

The step (a linear model's summed squared error, its gradient averaged over
devices, one SGD update) is small enough that calling it costs more than
computing it, so the time per call is mostly dispatch: Python, argument
checks, launching N device programs. Since jax 0.8 pmap is itself
`jit(shard_map)` with a Python wrapper around it; this measures what that
wrapper costs per call.

    python -m bench.runners.dispatch --json docs/measured/dispatch.json

(or `python -m docs.build_guide --measure dispatch`). Each call waits for its
result: queued collective steps can deadlock emulated CPU devices
(docs/jax-facts.md). The runs are interleaved window by window, so a
window's ratio cancels the machine's slow drifts. Takes a few seconds.
"""

import argparse
import json
import os
import statistics
import sys
import time

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax import lax  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import AxisType, NamedSharding  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top,wrong-import-position

# name -> (features, examples per device): a tiny step and a small one.
SIZES = {"tiny": (4, 2), "small": (1024, 64)}
RUNS = ("pmap", "shard_map", "jit")


def _loss(w, x, y):
  return jnp.sum((x @ w - y) ** 2)


def _step(axis):
  def step(w, x, y):
    return w - 0.01 * lax.pmean(jax.grad(_loss)(w, x, y), axis)
  return step


def steps(n, features, per_device, seed=0):
  """Each run's step and its placed arguments, all on the same numbers."""
  rng = np.random.default_rng(seed)
  w = rng.normal(size=features).astype(np.float32)
  x = rng.normal(size=(n * per_device, features)).astype(np.float32)
  y = rng.normal(size=n * per_device).astype(np.float32)
  devices = jax.local_devices()[:n]
  mesh = jax.make_mesh((n,), ("data",), axis_types=(AxisType.Auto,),
                       devices=devices)
  rows, same = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  split = lambda a: a.reshape(n, per_device, *a.shape[1:])
  pmapped = jax.pmap(_step("data"), axis_name="data", devices=devices)
  # pmap's own output placement, so that no call reshards its inputs.
  w_stacked = pmapped(np.broadcast_to(w, (n, features)), split(x), split(y))
  x_stacked, y_stacked = (jax.device_put(split(a), w_stacked.sharding)
                          for a in (x, y))
  shard_mapped = jax.jit(jax.shard_map(
      _step("data"), mesh=mesh, in_specs=(P(), P("data"), P("data")),
      out_specs=P(), check_vma=False))
  jitted = jax.jit(lambda w, x, y: w - 0.01 * jax.grad(
      lambda w: _loss(w, x, y) / n)(w), out_shardings=same)
  placed = (jax.device_put(w, same), jax.device_put(x, rows),
            jax.device_put(y, rows))
  return {"pmap": (pmapped, (w_stacked, x_stacked, y_stacked)),
          "shard_map": (shard_mapped, placed), "jit": (jitted, placed)}


def _window(fn, args, calls):
  w, rest = args[0], args[1:]
  start = time.perf_counter()
  for _ in range(calls):
    w = fn(w, *rest)
    w.block_until_ready()
  return (time.perf_counter() - start) / calls


def measure(windows=7, calls=40, n=8):
  """Microseconds per call, window by window, for every size and run."""
  out = {}
  for size, (features, per_device) in SIZES.items():
    runs = steps(n, features, per_device)
    for fn, args in runs.values():
      _window(fn, args, 3)  # compile, and pmap's second-call placement
    times = {name: [] for name in runs}
    for _ in range(windows):
      for name, (fn, args) in runs.items():
        times[name].append(_window(fn, args, calls) * 1e6)
    out[size] = {
        "features": features, "examples_per_device": per_device,
        "runs": {name: {"us_per_call": statistics.median(t),
                        "us_per_call_spread": [min(t), max(t)],
                        "window_us_per_call": t}
                 for name, t in times.items()}}
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", help="write the measurement here")
  parser.add_argument("--windows", type=int, default=7)
  parser.add_argument("--calls", type=int, default=40)
  args = parser.parse_args(argv)
  load = os.getloadavg()[0]
  sizes = measure(args.windows, args.calls)
  record = {
      "what": "time per call of a small data-parallel SGD step (linear "
              "model, summed squared error), each call waited for",
      "workload": ", ".join(f"{k}: {v['features']} features, "
                            f"{v['examples_per_device']} examples per device"
                            for k, v in sizes.items()),
      "devices": jax.device_count(), "platform": jax.devices()[0].platform,
      "jax_version": jax.__version__, "windows": args.windows,
      "calls_per_window": args.calls,
      "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
      "sizes": sizes}
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(record, f, indent=1)
      f.write("\n")
  for size, entry in sizes.items():
    for name, run in entry["runs"].items():
      print(f"{size:<6} {name:<10} {run['us_per_call']:8.1f} us/call "
            f"(spread {run['us_per_call_spread'][0]:.1f}-"
            f"{run['us_per_call_spread'][1]:.1f})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
