"""pmap's state held as per-device shards (`Port.pmap_specs`): FSDP's
classic program, each device holding one piece of a leaf split along an
axis, pmap taking the pieces stacked.

A spec is read in the `PartitionSpec` language of `Port.port_specs`: an
axis that names the mesh's axes is split over pmap's devices (all of the
mesh's, in its order), one piece per device; a leaf with no such axis is a
copy per device. The engine splits a host state so (`place`), reads it
back whole (`join`) and traces pmap's step on the pieces' shapes
(`abstract`, `whole`).
"""

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from compare import conversions


def axes(port, state) -> list | None:
  """The split axis of every leaf of `state` (in `jax.tree.leaves` order;
  None: a copy per device) by `port.pmap_specs`, or None without them.

  Raises:
    ValueError: a spec that is not a prefix of the state, splits more than
      one axis, names other than all of the mesh's axes, or splits an axis
      pmap's devices do not divide.
  """
  if port.pmap_specs is None:
    return None
  specs = conversions.spec_per_leaf(port.pmap_specs, state)
  names = tuple(port.mesh.axis_names)
  found = []
  for (path, x), spec in zip(jax.tree_util.tree_leaves_with_path(state),
                             jax.tree.leaves(specs, is_leaf=_is_spec)):
    where = f"leaf {jax.tree_util.keystr(path)} {list(np.shape(x))}"
    split = [i for i, entry in enumerate(spec) if entry is not None]
    if len(split) > 1 or len(spec) > np.ndim(x):
      raise ValueError(f"{where}: {spec} splits more than one axis, or more "
                      "axes than the leaf has (pmap holds one piece a device)")
    if split and _names(spec[split[0]]) != names:
      raise ValueError(f"{where}: {spec} must name all of the mesh's axes "
                      f"{names} (pmap maps over all of its devices)")
    if split and np.shape(x)[split[0]] % port.mesh.size:
      raise ValueError(f"{where}: axis {split[0]} does not split over "
                      f"{port.mesh.size} devices")
    found.append(split[0] if split else None)
  return found


def _is_spec(x) -> bool:
  return isinstance(x, P)


def _names(entry) -> tuple:
  return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _local_rows(mesh) -> list[int]:
  """This process's devices' places among pmap's (the mesh's, in order)."""
  return [i for i, d in enumerate(mesh.devices.flat)
          if d.process_index == jax.process_index()]


def place(state, split, mesh, devices):
  """A whole host `state` as pmap takes it on this process's `devices`:
  each leaf `[local devices, *piece]`, device i's piece on device i."""
  n, rows = mesh.size, _local_rows(mesh)
  sharding = NamedSharding(jax.sharding.Mesh(np.array(devices), ("devices",)),
                           P("devices"))

  def stacked(x, axis):
    x = np.asarray(x)
    pieces = (np.broadcast_to(x, (n, *x.shape)) if axis is None
              else np.stack(np.split(x, n, axis=axis)))
    mine = np.ascontiguousarray(pieces[rows])
    return _owned(jax.make_array_from_single_device_arrays(
        mine.shape, sharding,
        [jax.device_put(row[None], d) for row, d in zip(mine, devices)]),
                  mine)

  leaves, tree = jax.tree.flatten(jax.device_get(state))
  return jax.tree.unflatten(tree, [stacked(x, a)
                                   for x, a in zip(leaves, split)])


def _owned(array, host):
  """`array`, copied device to device where any device's piece is `host`'s
  memory: XLA:CPU puts a 64-byte aligned numpy row without a copy, and a
  donating step must own what it is given (`conversions.to_mesh`'s
  `_owned` looks at the first piece alone: each of these pieces is a
  different row of `host`, any of them aligned)."""
  start = host.ctypes.data
  if any(start <= shard.data.unsafe_buffer_pointer() < start + host.nbytes
         for shard in array.addressable_shards):
    return jax.device_put(array, array.sharding, may_alias=False)
  return array


def join(state, split):
  """pmap's stacked `state` on the host, every leaf whole: its pieces
  joined, or its first copy; every process's pieces, in process order."""
  leaves, tree = jax.tree.flatten(jax.device_get(state))
  if jax.process_count() > 1:  # each process holds its own devices' pieces
    leaves = multihost_utils.process_allgather(leaves, tiled=True)
  return jax.tree.unflatten(tree, [
      np.array(x[0]) if a is None else np.concatenate(list(x), axis=a)
      for x, a in zip(leaves, split)])


def abstract(state, split, n_local: int, n: int):
  """`state`'s shapes as pmap's step takes them: `[n_local, *piece]`."""
  def piece(x, axis):
    shape = list(np.shape(x))
    if axis is not None:
      shape[axis] //= n
    return jax.ShapeDtypeStruct((n_local, *shape), np.asarray(x).dtype)
  leaves, tree = jax.tree.flatten(state)
  return jax.tree.unflatten(tree, [piece(x, a) for x, a in zip(leaves, split)])


def whole(out, split, n: int):
  """pmap's traced state (device axis dropped) with each piece's split
  axis `n` times longer: the whole leaves' shapes."""
  def grown(x, axis):
    shape = list(x.shape)
    if axis is not None:
      shape[axis] *= n
    return jax.ShapeDtypeStruct(tuple(shape), x.dtype)
  leaves, tree = jax.tree.flatten(out)
  if len(leaves) != len(split):  # a tree of other leaves: tree_difference
    return out
  return jax.tree.unflatten(tree, [grown(x, a) for x, a in zip(leaves, split)])


class Checkpoints:
  """pmap's sharded state in a checkpoint (`--switch-at`): every leaf
  whole, as the ports' layouts save it, so a port restores it; restored
  whole onto one device, then split onto pmap's devices as `like` holds
  them (`shardport.training.checkpoints.Layout`'s `placement`).

  Args:
    axes: the split axis of every leaf of the saved fields
      (`checkpoints.saved_fields` of the state with its axes for leaves,
      `REPLICATED` for a copy per device).
    mesh: the Port's mesh.
  """

  REPLICATED = -1

  def __init__(self, axes, mesh):
    self._axes, self._mesh = axes, mesh

  def _split(self):
    return [None if a == self.REPLICATED else a
            for a in jax.tree.leaves(self._axes)]

  def to_checkpoint(self, tree):
    return join(tree, self._split())

  def checkpoint_target(self, tree):
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    n = self._mesh.size
    leaves, treedef = jax.tree.flatten(tree)
    return jax.tree.unflatten(treedef, [
        jax.ShapeDtypeStruct(
            tuple(s * (n if i == a else 1) for i, s in enumerate(x.shape[1:])),
            x.dtype, sharding=device)
        for x, a in zip(leaves, self._split())])

  def from_checkpoint(self, tree, like):
    devices = list(jax.tree.leaves(like)[0].sharding.mesh.devices.flat)
    return place(tree, self._split(), self._mesh, devices)
