"""Device plumbing for pmap: device lists, a leading device axis, replicas."""

import os

import einops
import flax.jax_utils
import jax
from jax.experimental import multihost_utils
import numpy as np

from shardport.workloads import configs
from shardport.workloads import ensemble

AXIS = "batch"
BACKEND = "legacy_pmap"
STEP_TAKES_HOST_LOCAL = True


# region: many-hosts-pmap
def placement(n_devices: int) -> list[jax.Device]:
  """The first `n_devices` local devices of every process, in pmap's order.

  In one process these are its first devices. With many processes (pmap
  over every process's devices, as classic multi-host programs run) they
  come process after process, the order in which pmap lays out its axis.
  """
  available = jax.local_devices()
  if not 1 <= n_devices <= len(available):
    raise configs.DeviceError(f"asked for {n_devices} devices, {len(available)} exist")
  return [device for process in range(jax.process_count())
          for device in jax.local_devices(process)[:n_devices]]


def _local(where) -> list[jax.Device]:
  """This process's devices among `where`: what each pmap input must cover.

  Under many processes pmap takes and returns host-local arrays, one row per
  local device, and joins them into its global axis itself.
  """
  return [d for d in where if d.process_index == jax.process_index()]


def replicate(tree, where):
  """One copy of `tree` per local device, stacked on a new leading axis."""
  return flax.jax_utils.replicate(tree, devices=_local(where))


def shard_batch(batch, where):
  """This process's rows of the global batch as `[local devices, b, ...]`.

  In one process the rows are the whole global batch; with many, each
  process reads only its slice (`shardport.workloads.batches.process_slice`) and pmap
  joins the slices in process order.
  """
  # jax.device_put_sharded is gone in jax 0.10; this is what
  # flax.jax_utils.replicate does internally, without the copies.
  mine = _local(where)
  mesh = jax.sharding.Mesh(np.array(mine), (AXIS,))
  sharding = jax.sharding.NamedSharding(mesh, jax.P(AXIS))
  split = lambda x: einops.rearrange(x, "(d b) ... -> d b ...", d=len(mine))
  return jax.device_put(jax.tree.map(split, batch), sharding)


def shard_members(tree, where):
  """This process's rows of a host tree with one row per device (members).

  Every process holds the whole tree (e.g. every member's init key); pmap
  takes the rows of this process's devices.
  """
  rows = np.array([i for i, d in enumerate(where)
                   if d.process_index == jax.process_index()])
  return jax.tree.map(lambda x: x[rows], tree)
# endregion


def fetch(tree):
  """Numpy copy of a replicated tree, without its device axis."""
  # Not flax.jax_utils.unreplicate: on one device it sees a "fully
  # replicated" [1, ...] array and keeps the device axis (flax 0.12.8).
  return jax.tree.map(lambda x: x[0], jax.device_get(tree))


# region: restore-placement
def to_checkpoint(tree):
  """The replicated tree as a checkpoint holds it: one copy, no device axis.

  Replica 0 of each leaf on the host, as `unreplicate` then `device_get`
  would give it, with one transfer per leaf and no collective.
  """
  return jax.tree.map(lambda x: np.asarray(x.addressable_shards[0].data)[0],
                      tree)


def checkpoint_target(tree):
  """Orbax restore targets for `tree`'s leaves, without the device axis.

  Each leaf is restored whole onto every device that holds a replica of it
  in `tree` (`P()` over pmap's devices), ready for `from_checkpoint`.
  """
  def target(x):
    # The original pmap runtime's PmapSharding has no mesh: one of its
    # devices, in its order.
    mesh = getattr(x.sharding, "mesh", None) or jax.sharding.Mesh(
        np.asarray(x.sharding.devices).reshape(-1), (AXIS,))
    return jax.ShapeDtypeStruct(x.shape[1:], x.dtype,
                                sharding=jax.sharding.NamedSharding(
                                    mesh, jax.P()))
  return jax.tree.map(target, tree)


def from_checkpoint(tree, like):
  """A restored tree in pmap's layout: a leading device axis, like `like`.

  One program over the whole tree gives each device's copy the leading axis
  of its own row (`like`'s shardings): nothing moves between devices. It is
  compiled once per layout: the lockstep checks place a state every step.
  """
  leaves, treedef = jax.tree.flatten(tree)
  if not hasattr(jax.tree.leaves(like)[0].sharding, "mesh"):
    # The original pmap runtime's PmapSharding, which jit does not take as
    # an output sharding: put each copy.
    return jax.tree.unflatten(treedef, [jax.device_put(np.broadcast_to(
        np.asarray(x), l.shape), l.sharding) for x, l in zip(
            leaves, jax.tree.leaves(like))])
  targets = tuple((x.shape, x.sharding) for x in jax.tree.leaves(like))
  _STACKS.setdefault(targets, jax.jit(lambda xs: [jax.numpy.broadcast_to(
      x, shape) for x, (shape, _) in zip(xs, targets)], out_shardings=[
          sharding for _, sharding in targets]))
  return jax.tree.unflatten(treedef, _STACKS[targets](leaves))
# endregion


_STACKS = {}


ENSEMBLE_AXIS = "ensemble"


def ensemble_placement(n_devices: int) -> list[jax.Device]:
  """The devices of an ensemble, one member each (pmap names the axis later)."""
  return placement(n_devices)


class MemberCheckpoints:
  """An ensemble's state as a checkpoint holds it: every member, the member
  axis leading, whatever the processes (`shardport.training.checkpoints.Layout`).

  pmap's per-member state is host-local under many processes (this
  process's members only): saved, it becomes one global array of all the
  members, which Orbax writes cooperatively (each process its own rows),
  and restored, each process takes its rows back. No copy either way.
  """

  @staticmethod
  def to_checkpoint(tree):
    if jax.process_count() == 1:
      return tree
    return jax.tree.map(lambda x: jax.make_array_from_single_device_arrays(
        _global_shape(x), _global_members(x),
        [s.data for s in x.addressable_shards]), tree)

  @staticmethod
  def checkpoint_target(tree):
    if jax.process_count() == 1:
      return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
          x.shape, x.dtype, sharding=x.sharding), tree)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
        _global_shape(x), x.dtype, sharding=_global_members(x)), tree)

  @staticmethod
  def from_checkpoint(tree, like):
    if jax.process_count() == 1:
      return tree

    def local_rows(x, l):
      by_device = {s.device: s.data for s in x.addressable_shards}
      return jax.make_array_from_single_device_arrays(
          l.shape, l.sharding, [by_device[s.device]
                                for s in l.addressable_shards])
    return jax.tree.map(local_rows, tree, like)


def _global_shape(x):
  return (x.shape[0] * jax.process_count(), *x.shape[1:])


def _global_members(x):
  """The global sharding of host-local per-member rows `x`: every process's
  first devices, process after process (pmap's own order)."""
  devices = [d for p in range(jax.process_count())
             for d in jax.local_devices(p)[:x.shape[0]]]
  mesh = jax.sharding.Mesh(np.array(devices), (ENSEMBLE_AXIS,))
  return jax.sharding.NamedSharding(mesh, jax.P(ENSEMBLE_AXIS))


# The axes of an ensemble whose members each train data-parallel:
# the outer and the inner pmap's, as the port's mesh names them.
MEMBERS_AXIS, DATA_AXIS = "members", "data"


def member_data_mesh(where, members: int) -> np.ndarray:
  """`where`'s devices as the nested pmap lays them out, `[members, data]`.

  The outer (members) axis is major: member m's row is devices m * D to
  (m + 1) * D - 1 of `where`, as on the port's mesh. Raises a DeviceError
  or EnsembleSizeError (one line) where no such mesh fits `where`.
  """
  shape = ensemble.mesh_shape(members, len(where))
  return np.array(where, dtype=object).reshape(shape)


class MemberReplicas:
  """A nested pmap's ensemble state as a checkpoint holds it: each member
  once, the member axis leading (`shardport.training.checkpoints.Layout`).

  The state holds member m on every device of its row, `[members, data,
  ...]` (the inner pmap's replicas); the checkpoint holds the first of them,
  and restoring copies it back to every device of the row. One process:
  nested pmap programs ran on one host.
  """

  @staticmethod
  def to_checkpoint(tree):
    return jax.tree.map(lambda x: np.asarray(x)[:, 0], tree)

  @staticmethod
  def checkpoint_target(tree):
    # Restored onto one device, then spread by `from_checkpoint`: the
    # original runtime's PmapSharding is no sharding Orbax restores onto.
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
        (x.shape[0], *x.shape[2:]), x.dtype, sharding=device), tree)

  @staticmethod
  def from_checkpoint(tree, like):
    return jax.tree.map(lambda x, l: jax.device_put(np.broadcast_to(
        np.asarray(x)[:, None], l.shape), l.sharding), tree, like)


# region: many-hosts-pmap-members
def fetch_members(tree):
  """Numpy copy of a per-member tree: the device axis is the member axis.

  With many processes pmap's outputs hold this process's members only:
  `process_allgather` joins every process's rows, in process order.
  """
  if jax.process_count() > 1:
    return multihost_utils.process_allgather(tree, tiled=True)
  return jax.device_get(tree)
# endregion


# Up to jax 0.9.2 this switch, read when jax is imported, brings back the
# original C++ pmap runtime (`=0`); jax 0.10.0 removed the switch and that
# runtime (pmap is `jit` over `shard_map` since jax 0.8.0).
MERGE_ENV = "JAX_PMAP_SHMAP_MERGE"
_MERGE_OPTION = "jax_pmap_shmap_merge"


def _identity(x):
  return x


def pmap_runtime() -> str:
  """Which implementation of `jax.pmap` this process runs.

  Probes with a tiny pmap over one device: the original runtime returns
  arrays whose sharding is a `jax.sharding.PmapSharding`; pmap implemented as
  `jit` over `shard_map` returns `NamedSharding`s (jax 0.10 has no
  `PmapSharding` at all).

  Returns:
    `"original"` when pmap's outputs carry `PmapSharding` (jax <= 0.9.2 run
    with `JAX_PMAP_SHMAP_MERGE=0`), `"shard_map"` otherwise.
  """
  pmap_sharding = getattr(jax.sharding, "PmapSharding", None)
  if pmap_sharding is None:
    return "shard_map"
  out = jax.pmap(_identity, devices=jax.local_devices()[:1])(
      np.zeros((1,), np.float32))
  return "original" if isinstance(out.sharding, pmap_sharding) else "shard_map"


def pmap_runtime_warning() -> str | None:
  """A one-line warning when `JAX_PMAP_SHMAP_MERGE` is set but not obeyed.

  Returns:
    A message when the variable is set and this jax has no such switch
    (jax >= 0.10: the setting is ignored), or when the switch exists but its
    value differs from the variable's (something changed it after jax read
    the environment, e.g. `jax.config.update`); None otherwise, including
    when the variable is not set.
  """
  value = os.environ.get(MERGE_ENV)
  if value is None:
    return None
  if _MERGE_OPTION not in jax.config.values:
    return (f"{MERGE_ENV}={value} is ignored: jax {jax.__version__} has no "
            f"such switch (removed in jax 0.10.0); pmap runs on shard_map")
  wanted = value.strip().lower() in ("1", "y", "yes", "t", "true", "on")
  actual = bool(jax.config.values[_MERGE_OPTION])
  if wanted != actual:
    return (f"{MERGE_ENV}={value}, but jax's {_MERGE_OPTION} is {actual}: "
            "it was changed after jax read the environment")
  return None
