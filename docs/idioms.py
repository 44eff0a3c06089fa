"""Idioms the guide's map points to, runnable: nested pmap, staged migration, rank.

- `nested_pmap_as_2d_mesh`: `pmap(pmap(f, 'inner'), 'outer')`, which jax
  0.10 refuses, becomes one shard_map over a 2-D mesh.
- The staged-migration helpers (region `staged`): what to call while some
  code still calls `jax.pmap` with a leading device axis and the helpers it
  used (`device_put_replicated`, `device_put_sharded`) are gone.
- `what_the_body_sees`: the shapes and indices pmap's function and
  shard_map's body see on jax 0.10 (region `rank`).

`tests/test_traps.py` runs each; `docs/MIGRATION.md` shows the regions.
Needs 8 devices (`python -m docs.idioms` emulates them on CPU).
"""

import os

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

N = 8


# region: nested-pmap
def normalise(x):
  """Per-device rows, scaled by sums over both axes of a 2-D device grid."""
  row_total = lax.psum(jnp.sum(x), "inner")  # over the inner devices
  return x / lax.psum(row_total, "outer")  # then over the outer ones


def nested_pmap(x):  # x: [outer, inner, b, d]; fails on jax 0.10 (ValueError)
  return jax.pmap(jax.pmap(normalise, axis_name="inner"),
                  axis_name="outer")(x)


def on_2d_mesh(outer, inner):  # x: [outer * inner * b, d], the global batch
  mesh = jax.make_mesh((outer, inner), ("outer", "inner"),
                       axis_types=(AxisType.Auto,) * 2)
  rows = P(("outer", "inner"))  # rows split over both axes, outer-major
  return mesh, jax.jit(jax.shard_map(normalise, mesh=mesh, in_specs=rows,
                                     out_specs=rows))
# endregion


def nested_pmap_as_2d_mesh(outer=2, inner=4, b=3, d=2):
  """The nested pmap and its 2-D mesh port on the same numbers."""
  x = np.arange(outer * inner * b * d, dtype=np.float32).reshape(
      outer * inner * b, d)
  mesh, step = on_2d_mesh(outer, inner)
  ported = step(jax.device_put(x, NamedSharding(mesh, P(("outer", "inner")))))
  try:  # the inner pmap's mesh clashes with the outer one's (jax 0.10)
    legacy = np.asarray(nested_pmap(x.reshape(outer, inner, b, d)))
  except ValueError as err:
    legacy = err
  return {"legacy": legacy, "ported": np.asarray(ported),
          "expected": x / x.sum(),
          "mesh shape": dict(mesh.shape)}


# region: staged
def pmap_devices(n=N):  # the devices a pmap over n devices runs on
  return jax.local_devices()[:n]


def stacked_sharding(devices):  # an Auto mesh: an Explicit one gives KeyError
  return NamedSharding(jax.sharding.Mesh(np.array(devices), ("devices",)),
                       P("devices"))


def put_replicated(x, devices):  # was jax.device_put_replicated(x, devices)
  stacked = jax.tree.map(
      lambda a: np.broadcast_to(a, (len(devices), *np.shape(a))), x)
  return jax.device_put(stacked, stacked_sharding(devices))


def put_sharded(shards, devices):  # was jax.device_put_sharded(shards, devices)
  return jax.make_array_from_single_device_arrays(
      (len(shards), *np.shape(shards[0])), stacked_sharding(devices),
      [jax.device_put(np.asarray(s)[None], d) for s, d in zip(shards, devices)])


def stacked_to_global(stacked, mesh, axis="data"):  # [N, b, ...] -> [N*b, ...]
  by_device = {s.device: s.data for s in stacked.addressable_shards}
  return jax.make_array_from_single_device_arrays(
      (stacked.shape[0] * stacked.shape[1], *stacked.shape[2:]),
      NamedSharding(mesh, P(axis)),
      [by_device[d][0] for d in mesh.devices.flat])


def global_to_stacked(array, devices):  # [N*b, ...] split -> [N, b, ...]
  by_device = {s.device: s.data for s in array.addressable_shards}
  return jax.make_array_from_single_device_arrays(
      (len(devices), array.shape[0] // len(devices), *array.shape[1:]),
      stacked_sharding(devices), [by_device[d][None] for d in devices])
# endregion


def staged_migration():
  """The helpers against what the removed helpers and pmap gave."""
  devices = pmap_devices()
  shards = [np.full((3,), i, np.float32) for i in range(N)]
  double = jax.pmap(lambda a: 2 * a, devices=devices)
  replicated = put_replicated({"w": np.arange(3.0, dtype=np.float32)},
                              devices)
  sharded = put_sharded(shards, devices)
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  global_array = stacked_to_global(double(sharded), mesh)
  back = global_to_stacked(global_array, devices)
  return {"replicated": replicated, "sharded": sharded,
          "pmap(sharded)": double(sharded), "global": global_array,
          "back to pmap": double(back), "shards": np.stack(shards)}


# region: rank
def pmap_sees(x):  # x: [N, b, d] (or [N]: the body sees a scalar)
  seen = {}

  def body(block):
    seen["shape"] = block.shape  # (b, d): the device axis is gone
    return lax.axis_index("i") * jnp.ones(())  # a scalar per device is fine

  out = jax.pmap(body, axis_name="i")(x)  # out: [N], one scalar each
  return seen, out


def shard_map_sees(x, mesh):  # x: [N * b, d] (or [N]: a [1] block)
  seen = {}

  def body(block):
    seen["shape"] = block.shape  # (b, d): the axis stays, its size split
    return lax.axis_index("data")[None]  # a scalar needs a [1] axis

  out = jax.shard_map(body, mesh=mesh, in_specs=P("data"),
                      out_specs=P("data"))(x)  # out: [N]
  return seen, out
# endregion


def what_the_body_sees(b=4, d=3):
  """Shapes and device indices inside pmap and shard_map, and their outputs."""
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  x = np.ones((N * b, d), np.float32)
  pmap_seen, pmap_out = pmap_sees(x.reshape(N, b, d))
  shard_seen, shard_out = shard_map_sees(
      jax.device_put(x, NamedSharding(mesh, P("data"))), mesh)
  vector = np.arange(N, dtype=np.float32)  # one number per device
  pmap_vector, _ = pmap_sees(vector)
  shard_vector, _ = shard_map_sees(
      jax.device_put(vector, NamedSharding(mesh, P("data"))), mesh)
  return {"pmap body shape of [N]": pmap_vector["shape"],
          "shard_map body shape of [N]": shard_vector["shape"],
"pmap body shape": pmap_seen["shape"],
          "shard_map body shape": shard_seen["shape"],
          "pmap axis_index": np.asarray(pmap_out).tolist(),
          "shard_map axis_index": np.asarray(shard_out).tolist(),
          "pmap out shape": pmap_out.shape,
          "shard_map out shape": shard_out.shape}


def main():
  for name, result in (("nested pmap -> 2-D mesh", nested_pmap_as_2d_mesh()),
                       ("staged migration", staged_migration()),
                       ("what the body sees", what_the_body_sees())):
    print(f"\n{name}:")
    for key, value in result.items():
      print(f"  {key}: {np.asarray(value).tolist() if hasattr(value, 'shape') and not isinstance(value, tuple) else value}")


if __name__ == "__main__":
  main()
