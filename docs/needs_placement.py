"""What a port needs around its step: placement, and compiling once.

- `reshard`: an input placed otherwise than `in_specs` says, on an Explicit
  mesh (`jax.make_mesh`'s default on jax 0.10) and on an Auto one.
- `build-once`, `build-once-pmap`: the mesh, shardings and
  `jit(shard_map(...))` built once, with compiles counted; pmap compiling
  again at step 2 on `flax.jax_utils.replicate`'s copies.

The functions after the regions run them for `tests/test_needs.py`; they
need 8 devices (`python -m docs.needs_placement` emulates them on CPU).
"""
# Each region imports what it uses, so that it can be copied alone.
# pylint: disable=reimported,g-import-not-at-top,wrong-import-position
# pylint: disable=ungrouped-imports,g-bad-import-order

import os

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")


# region: reshard
import jax
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def doubled(mesh):
  return jax.shard_map(lambda b: 2 * b, mesh=mesh, in_specs=P("data"),
                       out_specs=P("data"))


def on_explicit_mesh(x, n=8):  # jax.make_mesh's default axes: Explicit
  mesh = jax.make_mesh((n,), ("data",))
  replicated = jax.device_put(x, NamedSharding(mesh, P()))
  # doubled(mesh)(replicated): ValueError, in_specs ... does not match
  wanted = NamedSharding(mesh, P("data"))  # a bare P needs jax.set_mesh
  outside = doubled(mesh)(jax.reshard(replicated, wanted))  # or device_put
  inside = jax.jit(lambda a: doubled(mesh)(jax.reshard(a, wanted)))
  return outside, inside(replicated)


def on_auto_mesh(x, n=8):  # in_specs still reshards, silently
  mesh = jax.make_mesh((n,), ("data",), axis_types=(AxisType.Auto,))
  replicated = jax.device_put(x, NamedSharding(mesh, P()))
  wanted = NamedSharding(mesh, P("data"))  # jax.reshard refuses Auto axes
  outside = doubled(mesh)(jax.device_put(replicated, wanted))
  inside = jax.jit(lambda a: doubled(mesh)(
      lax.with_sharding_constraint(a, wanted)))
  return outside, inside(replicated)
# endregion


# region: build-once
import contextlib

import jax
from jax import lax
from jax.sharding import PartitionSpec as P


@contextlib.contextmanager
def compiles():  # counts XLA compiles; `jax.log_compiles()` prints them
  count = []  # (a persistent compilation cache's hits are not compiles)

  def listen(event, seconds, **kwargs):
    del kwargs
    if event == "/jax/core/compile/backend_compile_duration":
      count.append(seconds)
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield count
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)


def build(mesh):  # a new function each call: jit compiles it anew
  return jax.jit(jax.shard_map(lambda b: b - lax.pmean(b, "data"),
                               mesh=mesh, in_specs=P("data"),
                               out_specs=P("data")))


def port_steps(x, mesh, steps, rebuild=False):
  step = build(mesh)  # once, outside the loop
  for _ in range(steps):
    x = (build(mesh) if rebuild else step)(x)
  return x
# endregion


# region: build-once-pmap
import flax.jax_utils
import jax


def pmap_steps(w, steps, axis_name="_device_put_sharded"):  # flax's default
  # pmap returns its outputs on a mesh named after its axis ("batch"): with
  # another name, replicate's copies differ from them and step 2 compiles.
  step = jax.pmap(lambda v: v + 1, axis_name="batch")
  w = flax.jax_utils.replicate(w, axis_name=axis_name)
  for _ in range(steps):
    w = step(w)
  return w
# endregion


# The regions on the same numbers (8 devices), for tests/test_needs.py.
import numpy as np

from docs.needs import outcome
from docs.traps_common import N, auto_mesh, collectives


def reshard_facts(n=N):
  """An input placed otherwise than `in_specs`, on both kinds of mesh."""
  x = np.arange(2 * n, dtype=np.float32)
  explicit = jax.make_mesh((n,), ("data",))
  auto = auto_mesh(n=n)
  on_explicit = jax.device_put(x, NamedSharding(explicit, P()))
  on_auto = jax.device_put(x, NamedSharding(auto, P()))
  wsc = jax.jit(lambda a: lax.with_sharding_constraint(
      a, NamedSharding(explicit, P("data"))))
  columns = jax.device_put(np.arange(n * n, dtype=np.float32).reshape(n, n),
                           NamedSharding(auto, P(None, "data")))
  return {
      "expected": 2 * x,
      "explicit axis types": explicit.axis_types,
      "explicit": on_explicit_mesh(x, n), "auto": on_auto_mesh(x, n),
      "explicit, as placed": outcome(doubled(explicit), on_explicit),
      "explicit, with_sharding_constraint": outcome(wsc, on_explicit),
      "auto, jax.reshard": outcome(jax.reshard, on_auto,
                                   NamedSharding(auto, P("data"))),
      "auto, as placed": doubled(auto)(on_auto),
      "auto all-to-alls, replicated in": collectives(
          jax.jit(doubled(auto)), on_auto)["all-to-all"],
      "auto all-to-alls, columns in": collectives(
          jax.jit(doubled(auto)), columns)["all-to-all"],
      "jax.reshard is jax.sharding.reshard":
          jax.reshard is jax.sharding.reshard}


def compile_counts(steps=3):
  """Compiles of `steps` steps: the port rebuilt or built once; pmap fed
  `replicate`'s copies under flax's axis name or pmap's."""
  mesh = auto_mesh()
  x = jax.device_put(np.arange(2 * N, dtype=np.float32),
                     NamedSharding(mesh, P("data")))
  w = np.zeros(3, np.float32)
  runs = {"port, rebuilt each step": lambda: port_steps(x, mesh, steps, True),
          "port, built once": lambda: port_steps(x, mesh, steps),
          "pmap, replicate default": lambda: pmap_steps(w, steps),
          "pmap, replicate axis_name='batch'": lambda: pmap_steps(
              w, steps, "batch")}
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
