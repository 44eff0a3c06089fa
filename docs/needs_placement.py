"""What a port needs around its step: placement, and compiling once.

- `reshard`: an input placed otherwise than `in_specs` says, on an Explicit
  mesh (`jax.make_mesh`'s default on jax 0.10) and on an Auto one.
- `build-once`, `build-once-pmap`: the mesh, shardings and
  `jit(shard_map(...))` built once; pmap compiling again at step 2 on
  `flax.jax_utils.replicate`'s copies unless they take pmap's axis name.
  `compile_counts` counts the compiles.

The functions after the regions run them for `tests/test_needs.py`; they
need 8 devices (`python -m docs.needs_placement` emulates them on CPU).
"""
# The regions' imports are the guide's page import block
# (docs/page_imports.py), stated once above them; each region keeps one
# blank line between definitions: the guide prints it.
# pylint: disable=reimported,g-import-not-at-top,wrong-import-position
# pylint: disable=ungrouped-imports,g-bad-import-order

import os

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import flax.jax_utils
import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P


# region: reshard
def doubled(axis_type):  # takes x placed otherwise, e.g. replicated: P()
  mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
  wanted = NamedSharding(mesh, P("data"))  # outside jit: jax.device_put
  step = jax.shard_map(lambda b: 2 * b, mesh=mesh, in_specs=P("data"),
                       out_specs=P("data"))
  if axis_type == AxisType.Explicit:  # make_mesh's default: step(x) fails
    return jax.jit(lambda x: step(jax.reshard(x, wanted)))
  # Auto: step(x) moves x silently; jax.reshard refuses Auto axes
  return jax.jit(lambda x: step(jax.lax.with_sharding_constraint(x, wanted)))
# endregion


# region: build-once
def port_steps(x, mesh, steps):  # jax.log_compiles() prints each compile
  step = jax.jit(jax.shard_map(  # once, outside the loop, not in it
      lambda b: b - jax.lax.pmean(b, "data"), mesh=mesh,
      in_specs=P("data"), out_specs=P("data")))
  for _ in range(steps):
    x = step(x)
  return x
# endregion


# region: build-once-pmap
def pmap_steps(w, steps, axis_name="batch"):  # replicate's default: 2 compiles
  step = jax.pmap(lambda v: v + 1, axis_name="batch")
  w = flax.jax_utils.replicate(w, axis_name=axis_name)  # pmap's axis name
  for _ in range(steps):
    w = step(w)
  return w
# endregion


# The regions on the same numbers (8 devices), for tests/test_needs.py.
import contextlib
import inspect

from jax import lax
import numpy as np

from docs.needs import outcome
from docs.traps_common import N, auto_mesh, collectives


def shard_doubled(mesh):
  """The region's step, alone: `in_specs` does the placing."""
  return jax.shard_map(lambda b: 2 * b, mesh=mesh, in_specs=P("data"),
                       out_specs=P("data"))


def reshard_facts():
  """An input placed otherwise than `in_specs`, on both kinds of mesh."""
  x = np.arange(2 * N, dtype=np.float32)
  explicit = jax.make_mesh((N,), ("data",))
  auto = auto_mesh()
  on_explicit = jax.device_put(x, NamedSharding(explicit, P()))
  on_auto = jax.device_put(x, NamedSharding(auto, P()))
  split = {"explicit": NamedSharding(explicit, P("data")),
           "auto": NamedSharding(auto, P("data"))}
  wsc = jax.jit(lambda a: lax.with_sharding_constraint(a, split["explicit"]))
  columns = jax.device_put(np.arange(N * N, dtype=np.float32).reshape(N, N),
                           NamedSharding(auto, P(None, "data")))
  return {
      "expected": 2 * x,
      "explicit axis types": explicit.axis_types,
      # Outside jit (jax.reshard, jax.device_put), and the region's in jit.
      "explicit": (
          shard_doubled(explicit)(jax.reshard(on_explicit,
                                              split["explicit"])),
          shard_doubled(explicit)(jax.device_put(on_explicit,
                                                 split["explicit"])),
          doubled(AxisType.Explicit)(on_explicit)),
      "auto": (shard_doubled(auto)(jax.device_put(on_auto, split["auto"])),
               doubled(AxisType.Auto)(on_auto)),
      "explicit, as placed": outcome(shard_doubled(explicit), on_explicit),
      "explicit, with_sharding_constraint": outcome(wsc, on_explicit),
      "auto, jax.reshard": outcome(jax.reshard, on_auto, split["auto"]),
      "auto, as placed": shard_doubled(auto)(on_auto),
      "auto all-to-alls, replicated in": collectives(
          jax.jit(shard_doubled(auto)), on_auto)["all-to-all"],
      "auto all-to-alls, columns in": collectives(
          jax.jit(shard_doubled(auto)), columns)["all-to-all"],
      "jax.reshard is jax.sharding.reshard":
          jax.reshard is jax.sharding.reshard}


@contextlib.contextmanager
def compiles():
  """Counts XLA compiles (a persistent cache's hits are not compiles)."""
  count = []

  def listen(event, seconds, **kwargs):
    del kwargs
    if event == "/jax/core/compile/backend_compile_duration":
      count.append(seconds)
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield count
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)


def rebuilt_steps(x, mesh, steps):
  """The region's step built inside the loop: a compile every step."""
  for _ in range(steps):
    x = jax.jit(jax.shard_map(lambda b: b - lax.pmean(b, "data"), mesh=mesh,
                              in_specs=P("data"), out_specs=P("data")))(x)
  return x


def compile_counts(steps=3):
  """Compiles of `steps` steps: the port rebuilt or built once; pmap fed
  `replicate`'s copies under flax's axis name or pmap's."""
  mesh = auto_mesh()
  x = jax.device_put(np.arange(2 * N, dtype=np.float32),
                     NamedSharding(mesh, P("data")))
  w = np.zeros(3, np.float32)
  default = inspect.signature(
      flax.jax_utils.replicate).parameters["axis_name"].default
  runs = {"port, rebuilt each step": lambda: rebuilt_steps(x, mesh, steps),
          "port, built once": lambda: port_steps(x, mesh, steps),
          "pmap, replicate default": lambda: pmap_steps(w, steps, default),
          "pmap, replicate axis_name='batch'": lambda: pmap_steps(w, steps)}
  counts = {}
  for name, run in runs.items():
    with compiles() as count:
      jax.block_until_ready(run())
    counts[name] = len(count)
  return counts


def main():
  from docs import needs  # pylint: disable=g-import-not-at-top
  needs.show((("reshard", reshard_facts()), ("compiles", compile_counts())))


if __name__ == "__main__":
  main()
