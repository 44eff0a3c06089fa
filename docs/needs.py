"""What a port needs beyond its step: batch norm, random keys, input.

Each region is what the guide shows for one need, runnable as it stands:

- `batchnorm-axis-name`: flax `BatchNorm(axis_name=...)` under pmap and in
  a port (the mesh axis).
- `dropout-keys`: a dropout key per device, and what
  `jax_threefry_partitionable` changes.
- `prefetch`: what replaces `flax.jax_utils.prefetch_to_device` and
  `flax.training.common_utils.shard`.

`docs/needs_placement.py` (placement, compiles) and `docs/needs_runtime.py`
(fetching, scan carries, nested pmap, the pmap escape hatch) have the
others. The functions after the regions run them on the same numbers for
`tests/test_needs.py`; they need 8 devices (`python -m docs.needs` emulates
them on CPU).
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

import flax.linen as nn
import jax
from jax.sharding import NamedSharding, PartitionSpec as P


# region: batchnorm-axis-name
def forward(variables, x, axis_name):  # pmap's axis; in a port, the mesh's
  bn = nn.BatchNorm(use_running_average=False, axis_name=axis_name)
  y, new = bn.apply(variables, x, mutable=["batch_stats"])
  return y, new["batch_stats"]  # the statistics of every device's rows

def batchnorms(mesh):  # x: [N, b, d] under pmap, [N * b, d] in the port
  pmapped = jax.pmap(lambda v, b: forward(v, b, "batch"), "batch",
                     in_axes=(None, 0))
  return pmapped, jax.jit(jax.shard_map(  # the stats, pmean'd, are P()
      lambda v, b: forward(v, b, "data"), mesh=mesh,
      in_specs=(P(), P("data")), out_specs=(P("data"), P())))
# endregion


# region: dropout-keys
def dropped(k, x, axis):  # the same key on every device: fold in its index
  k = jax.random.fold_in(k, jax.lax.axis_index(axis))  # else: one mask
  return nn.Dropout(0.5, deterministic=False).apply({}, x, rngs={"dropout": k})

def dropouts(mesh):  # x: [N, b, d] under pmap, [N * b, d] in the port
  pmapped = jax.pmap(lambda k, b: dropped(k, b, "batch"), "batch",
                     in_axes=(None, 0))
  return pmapped, jax.jit(jax.shard_map(
      lambda k, b: dropped(k, b, "data"), mesh=mesh,
      in_specs=(P(), P("data")), out_specs=P("data")))
# jax_threefry_partitionable (True since jax 0.5.0) changed these masks
# endregion


# region: prefetch
def prefetch(batches, mesh, depth=2):  # replaces prefetch_to_device, shard
  sharding = NamedSharding(mesh, P("data"))  # each batch keeps its shape
  put = lambda x: jax.make_array_from_process_local_data(sharding, x)
  queue = []  # puts return at once; that copies overlap steps is not measured
  for batch in batches:  # with many processes, each passes its own rows
    queue.append(jax.tree.map(put, batch))
    if len(queue) == depth:
      yield queue.pop(0)
  yield from queue
# endregion


# The regions on the same numbers (8 devices), for tests/test_needs.py.
import flax.jax_utils
from flax.training import common_utils
from jax.sharding import NamedSharding
import numpy as np

from compare._src.measure import hlo
from docs.traps_common import N, auto_mesh


def outcome(fn, *args):
  """`fn(*args)`, or the exception it raised."""
  try:
    return fn(*args)
  except Exception as err:  # pylint: disable=broad-except
    return err


def batchnorm(b=4, d=2):
  """pmap's and the port's BatchNorm, and the port without axis_name."""
  rng = np.random.default_rng(0)
  # Each device's rows on a scale of their own: its statistics differ.
  scale = np.repeat(np.arange(1, N + 1), b)[:, None]
  x = (scale * rng.normal(size=(N * b, d))).astype(np.float32)
  # Random params without flax's init, whose threefry compile takes
  # seconds; the running statistics as flax starts them.
  variables = {"params": {"scale": rng.normal(size=d).astype(np.float32),
                          "bias": rng.normal(size=d).astype(np.float32)},
               "batch_stats": {"mean": np.zeros(d, np.float32),
                               "var": np.ones(d, np.float32)}}
  mesh = auto_mesh()
  pmapped, ported = batchnorms(mesh)
  local = lambda v, a: forward(v, a, None)  # each device its own stats
  pmap_y, pmap_stats = pmapped(variables, x.reshape(N, b, d))
  port_y, port_stats = ported(variables, x)
  local_y, local_stats = jax.jit(jax.shard_map(
      local, mesh=mesh, in_specs=(P(), P("data")),
      out_specs=(P("data"), P("data"))))(variables, x)
  whole_y, whole = jax.jit(local)(variables, x)  # one device
  replicated_stats = jax.jit(jax.shard_map(
      local, mesh=mesh, in_specs=(P(), P("data")),
      out_specs=(P("data"), P())))
  return {"pmap": (np.asarray(pmap_y).reshape(N * b, -1),
                   jax.tree.map(lambda a: np.asarray(a)[0], pmap_stats)),
          "port": (np.asarray(port_y), port_stats),
          "port, axis_name=None": (np.asarray(local_y), local_stats),
          "one device, global batch": (np.asarray(whole_y), whole),
          "axis_name=None, stats P()": outcome(replicated_stats,
                                               variables, x)}


def dropout_keys(b=4, d=5):
  """Dropout masks per device: pmap, the port, the port without fold_in."""
  key, ones = jax.random.key(0), np.ones((N * b, d), np.float32)
  mesh = auto_mesh()
  pmapped, ported = dropouts(mesh)
  no_fold = jax.jit(jax.shard_map(
      lambda k, x: nn.Dropout(0.5, deterministic=False).apply(
          {}, x, rngs={"dropout": k}),
      mesh=mesh, in_specs=(P(), P("data")), out_specs=P("data")))
  masks = {"pmap": pmapped(key, ones.reshape(N, b, d)),
           "port": ported(key, ones),
           "port, no fold_in": no_fold(key, ones)}
  return {name: np.asarray(m).reshape(N, b, d) != 0
          for name, m in masks.items()}


def sharded_normal(mesh, spec, shape=(64, 8)):
  """A jitted draw, its output split by `spec`."""
  return jax.jit(lambda key: jax.random.normal(key, shape),
                 out_shardings=NamedSharding(mesh, spec))


def threefry_sharding(key=None):
  """A jitted draw split two ways, under each setting of the flag."""
  key = jax.random.key(0) if key is None else key
  mesh = auto_mesh()
  out = {"default": jax.config.jax_threefry_partitionable}
  for flag in (True, False):
    with jax.threefry_partitionable(flag):  # restores the flag after
      compiled = [sharded_normal(mesh, s).lower(key).compile()
                  for s in (P(), P("data"))]
      whole, split = (np.asarray(c(key)) for c in compiled)
      out[flag] = {"same for both splits": np.array_equal(whole, split),
                   "collectives when split": sum(hlo.collectives_executed(
                       compiled[1].as_text()).values()),
                   "values": whole}
  out["values differ"] = not np.array_equal(out[True]["values"],
                                            out[False]["values"])
  out["after"] = jax.config.jax_threefry_partitionable
  return out


def threefry_values(key=None, b=4, d=5):
  """What a key gives under each setting: keys, and pmap's dropout masks."""
  key = jax.random.key(0) if key is None else key
  ones = np.ones((N, b, d), np.float32)
  pmapped, _ = dropouts(auto_mesh())
  draws = {}
  for flag in (True, False):
    with jax.threefry_partitionable(flag):
      draws[flag] = {
          "split": jax.random.key_data(jax.random.split(key, 4)),
          "fold_in": jax.random.key_data(jax.random.fold_in(key, 3)),
          "pmap dropout masks": pmapped(key, ones) != 0}
  return {name: not np.array_equal(draws[True][name], draws[False][name])
          for name in draws[True]}


def prefetched(count=5, b=16, d=3):
  """Host batches through `prefetch`, and how far ahead it reads."""
  host = [{"x": np.full((b, d), i, np.float32),
           "y": np.arange(b, dtype=np.int32) + i} for i in range(count)]
  read = []

  def source():
    for batch in host:
      read.append(batch)
      yield batch

  batches = prefetch(source(), auto_mesh())
  first = next(batches)
  ahead = len(read)
  flax_first = next(flax.jax_utils.prefetch_to_device(
      map(common_utils.shard, host), 2))
  return {"host": host, "device": [first, *batches], "read at first": ahead,
          "flax prefetch_to_device": hasattr(flax.jax_utils,
                                             "prefetch_to_device"),
          "flax shard": hasattr(common_utils, "shard"),
          "flax batch": flax_first["x"]}


def show(results) -> None:
  """Prints `(name, {key: value})` results, arrays shortened."""
  for name, result in results:
    print(f"\n{name}:")
    with np.printoptions(threshold=8, edgeitems=2, precision=4):
      for key, value in result.items():
        print(f"  {key}: {value}")


def main():
  show((("batch norm", batchnorm()), ("dropout masks", dropout_keys()),
        ("threefry, split draws", threefry_sharding()),
        ("threefry, values", threefry_values())))


if __name__ == "__main__":
  main()
