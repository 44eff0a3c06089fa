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
# Each region imports what it uses, so that it can be copied alone.
# pylint: disable=reimported,g-import-not-at-top,wrong-import-position
# pylint: disable=ungrouped-imports,g-bad-import-order

import os

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")


# region: batchnorm-axis-name
import flax.linen as nn
import jax
from jax.sharding import PartitionSpec as P


class Net(nn.Module):
  """Dense then BatchNorm: the batch statistics are what devices share."""
  axis_name: str | None  # pmap's axis_name; in a port, the mesh axis

  @nn.compact
  def __call__(self, x):
    x = nn.Dense(3)(x)
    return nn.BatchNorm(use_running_average=False,
                        axis_name=self.axis_name)(x)


def forward(axis_name):
  def apply(variables, x):
    y, updates = Net(axis_name).apply(variables, x, mutable=["batch_stats"])
    return y, updates["batch_stats"]
  return apply


def pmap_forward(variables, x):  # x: [N, b, d]
  return jax.pmap(forward("batch"), axis_name="batch",
                  in_axes=(None, 0))(variables, x)


def port_forward(mesh, axis_name="data"):  # x: [N * b, d], split P("data")
  # pmean'd over the axis, the stats are the same everywhere: P(). With
  # axis_name=None each device keeps its own, and P() fails check_vma.
  stats = P() if axis_name else P("data")
  return jax.jit(jax.shard_map(forward(axis_name), mesh=mesh,
                               in_specs=(P(), P("data")),
                               out_specs=(P("data"), stats)))
# endregion


# region: dropout-keys
import flax.linen as nn
import jax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def dropped(key, x, axis):
  """`x` through dropout, with a key of this device's own."""
  key = jax.random.fold_in(key, lax.axis_index(axis))  # else: one mask
  return nn.Dropout(0.5, deterministic=False).apply(
      {}, x, rngs={"dropout": key})


def pmap_dropout(key, x):  # the same key on every device; x: [N, b, d]
  return jax.pmap(lambda k, b: dropped(k, b, "batch"), axis_name="batch",
                  in_axes=(None, 0))(key, x)


def port_dropout(mesh):  # x: [N * b, d]
  return jax.jit(jax.shard_map(lambda k, b: dropped(k, b, "data"),
                               mesh=mesh, in_specs=(P(), P("data")),
                               out_specs=P("data")))


# jax_threefry_partitionable is True on jax 0.10.2 (False before jax 0.5.0).
# A jitted draw then gives the same values however it is split, and no
# device waits on another (False: the same values, with collectives). But
# a key gives other numbers than it did under False (normal, bernoulli,
# split; fold_in is unchanged): a pmap program's init, dropout masks, a
# resumed key stream. The old numbers: `with jax.threefry_partitionable(
# False):` (or jax.config.update), at the cost of those collectives.
def sharded_normal(mesh, spec, shape=(64, 8)):  # a jitted draw, split by spec
  return jax.jit(lambda key: jax.random.normal(key, shape),
                 out_shardings=NamedSharding(mesh, spec))
# endregion


# region: prefetch
import collections
import itertools

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def prefetch(batches, mesh, depth=2, axis="data"):
  """Host batches `[B, ...]` as global arrays split over `axis`, `depth`
  batches ahead of the step (copies are asynchronous: they overlap it).

  Was `prefetch_to_device(map(common_utils.shard, batches), 2)`: both still
  exist in flax 0.12.8, for pmap's `[N, B/N, ...]` layout on a mesh named
  `_device_put_sharded`. Here the batch keeps its shape.
  """
  sharding = NamedSharding(mesh, P(axis))
  # With many processes each passes its own rows (jax.device_put in one).
  put = lambda x: jax.make_array_from_process_local_data(sharding, x)
  batches, queue = iter(batches), collections.deque()

  def enqueue(n):
    for batch in itertools.islice(batches, n):
      queue.append(jax.tree.map(put, batch))

  enqueue(depth)
  while queue:
    yield queue.popleft()
    enqueue(1)
# endregion


# The regions on the same numbers (8 devices), for tests/test_needs.py.
import flax.jax_utils
from flax.training import common_utils
import numpy as np

from compare import hlo
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
  shapes = jax.eval_shape(Net(None).init, jax.random.key(0), x)["params"]
  variables = {"params": jax.tree.map(
      lambda s: rng.normal(size=s.shape).astype(np.float32), shapes),
               "batch_stats": {"BatchNorm_0": {
                   "mean": np.zeros(3, np.float32),
                   "var": np.ones(3, np.float32)}}}
  mesh = auto_mesh()
  pmap_y, pmap_stats = pmap_forward(variables, x.reshape(N, b, d))
  port_y, port_stats = port_forward(mesh)(variables, x)
  local_y, local_stats = port_forward(mesh, None)(variables, x)
  whole_y, whole = jax.jit(forward(None))(variables, x)  # one device
  replicated_stats = jax.jit(jax.shard_map(
      forward(None), mesh=mesh, in_specs=(P(), P("data")),
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
  no_fold = jax.jit(jax.shard_map(
      lambda k, x: nn.Dropout(0.5, deterministic=False).apply(
          {}, x, rngs={"dropout": k}),
      mesh=mesh, in_specs=(P(), P("data")), out_specs=P("data")))
  masks = {"pmap": pmap_dropout(key, ones.reshape(N, b, d)),
           "port": port_dropout(mesh)(key, ones),
           "port, no fold_in": no_fold(key, ones)}
  return {name: np.asarray(m).reshape(N, b, d) != 0
          for name, m in masks.items()}


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
  draws = {}
  for flag in (True, False):
    with jax.threefry_partitionable(flag):
      draws[flag] = {
          "split": jax.random.key_data(jax.random.split(key, 4)),
          "fold_in": jax.random.key_data(jax.random.fold_in(key, 3)),
          "pmap dropout masks": pmap_dropout(key, ones) != 0}
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
