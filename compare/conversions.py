"""pmap's layouts and their jax.sharding twins, converted for a team's port.

A pmap program holds its state as one copy per device, stacked on a leading
axis (`replicate`), and takes its batch as `[devices, per-device batch,
...]` (`split_batch`). Its port holds the same values as arrays on a `Mesh`:
one logical copy replicated over it (`to_mesh`), the batch split over its
devices along the leading axis (`shard_batch`). `device_key` gives every
device its own dropout key, the same way under pmap and under shard_map.
"""

import einops
import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def replicate(tree, devices):
  """One copy of `tree` per device, stacked on a new leading axis (pmap).

  Each device's row is put on it alone: `flax.jax_utils.replicate` stacks
  every device's copy on the host first, a transient host copy of the
  whole device-set (issue 57: 1.8 GB at 19.9M parameters on 8 devices).
  """
  devices = list(devices)
  sharding = NamedSharding(jax.sharding.Mesh(np.array(devices), ("devices",)),
                           P("devices"))

  def stacked(x):
    row = (x if isinstance(x, jax.Array) else np.asarray(x))[None]
    return _owned(jax.make_array_from_single_device_arrays(
        (len(devices), *row.shape[1:]), sharding,
        [jax.device_put(row, device) for device in devices]), row)
  return jax.tree.map(stacked, tree)


def _owned(array, host):
  """`array`, copied where a device's buffer is `host`'s own memory.

  On XLA:CPU `device_put` of a 64-byte aligned numpy array is zero-copy,
  whatever `may_alias` says: every device's shard aliases the host's memory,
  and a donating step cannot take it, so each step allocates (and faults in)
  fresh outputs (docs/jax-facts.md). A device-to-device copy owns its
  buffer; an unaligned array was copied already (copying it again cost the
  proof 250 MB of peak memory at 8M parameters).
  """
  if isinstance(host, np.ndarray) and any(
      shard.data.unsafe_buffer_pointer() == host.ctypes.data
      for shard in array.addressable_shards):
    return jax.device_put(array, array.sharding, may_alias=False)
  return array


def unreplicate(tree):
  """The first copy of a stacked (pmap) tree, as numpy.

  Not `flax.jax_utils.unreplicate`: on one device it sees a fully
  replicated `[1, ...]` array and keeps the device axis (flax 0.12.8).
  """
  return jax.tree.map(lambda x: np.asarray(x.addressable_shards[0].data)[0]
                      if isinstance(x, jax.Array) else np.asarray(x)[0], tree)


def split_batch(batch, n_devices: int):
  """A global batch as pmap takes it: `[n_devices, rows / n, ...]` (numpy
  or jax arrays, also inside a traced function)."""
  return jax.tree.map(
      lambda x: einops.rearrange(x, "(d b) ... -> d b ...", d=n_devices),
      batch)


def _global(tree, sharding, owned: bool = False):
  """Host arrays (the same in every process) as global arrays: each
  process places its own devices' pieces, so a mesh may span processes.
  `owned`: no device's buffer is the host's memory (`_owned`)."""
  def put(x):
    x = np.asarray(x)
    array = jax.make_array_from_callback(x.shape, sharding,
                                         lambda index: x[index])
    return _owned(array, x) if owned else array
  return jax.tree.map(put, jax.device_get(tree))


def to_mesh(tree, mesh, specs=None):
  """One logical copy of a host tree on `mesh`, in one process or many
  (every process passes the same tree).

  Args:
    tree: host arrays (numpy, or anything `jax.device_get` takes).
    mesh: the mesh.
    specs: how each leaf lies on the mesh: a `PartitionSpec`, or a pytree
      of them shaped as `tree` or as a prefix of it (a whole subtree, e.g.
      `opt_state`, under one spec), matched by key path, so a flax train
      state built again (its `tx` another object) takes the specs made from
      the first. None: every leaf replicated (`P()`).

  Returns:
    `tree` as global arrays, no device's buffer the host's memory.
  """
  if specs is None:
    return _global(tree, NamedSharding(mesh, P()), owned=True)
  tree = jax.device_get(tree)
  return jax.tree.map(
      lambda spec, x: _global(x, NamedSharding(mesh, spec), owned=True),
      spec_per_leaf(specs, tree), tree, is_leaf=_is_spec)


def abstract_on_mesh(tree, mesh, specs=None):
  """`tree`'s shapes and dtypes as `to_mesh(tree, mesh, specs)` would place
  them (`jax.ShapeDtypeStruct`s with their shardings), nothing placed.

  Raises:
    ValueError: `specs` leaves a leaf of `tree` without a spec, names an
      axis `mesh` has not, or splits a dimension its axes do not divide.
  """
  def leaf(path, spec, x):
    shape = np.shape(x)
    try:
      if len(spec) > len(shape):
        raise ValueError(f"{spec} has more dimensions than its shape")
      sharding = NamedSharding(mesh, spec)
      sharding.shard_shape(shape)  # raises where the axes do not divide it
    except ValueError as err:
      raise ValueError(f"leaf {jax.tree_util.keystr(path)} {list(shape)}: "
                       f"{str(err).strip().splitlines()[0]}") from err
    return jax.ShapeDtypeStruct(shape, np.asarray(x).dtype, sharding=sharding)
  return jax.tree_util.tree_map_with_path(
      leaf, spec_per_leaf(P() if specs is None else specs, tree), tree,
      is_leaf=_is_spec)


def _is_spec(x) -> bool:
  return isinstance(x, P)


def spec_per_leaf(specs, tree):
  """`specs` (a `PartitionSpec`, or a pytree of them shaped as `tree` or a
  prefix of it) as one spec per leaf of `tree`, in `tree`'s structure:
  each leaf takes the spec at the longest key path that leads to it.

  Raises:
    ValueError: a leaf no spec leads to, or a spec that is not one.
  """
  given = jax.tree_util.tree_flatten_with_path(specs, is_leaf=_is_spec)[0]
  for path, spec in given:
    if not _is_spec(spec):
      where = jax.tree_util.keystr(path) or "the root"
      raise ValueError(f"the spec at {where} is a {type(spec).__name__}, "
                       "not a PartitionSpec")
  leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
  out, used = [], set()
  for path, _ in leaves:
    found = [(len(p), i) for i, (p, _) in enumerate(given)
             if tuple(path[:len(p)]) == p]
    if not found:
      raise ValueError(f"no spec for leaf {jax.tree_util.keystr(path)}")
    chosen = max(found)[1]
    used.add(chosen)
    out.append(given[chosen][1])
  for i, (path, _) in enumerate(given):
    if i not in used:  # a misspelt key would leave its leaves replicated
      raise ValueError(f"the spec at {jax.tree_util.keystr(path)} leads to "
                       "no leaf")
  return jax.tree.unflatten(treedef, out)


def shard_batch(batch, mesh):
  """A global host batch split over all of `mesh`'s devices by rows, in
  one process or many (every process passes the whole batch)."""
  return _global(batch, NamedSharding(mesh, P(mesh.axis_names)))


def stacked_to_mesh(tree, mesh):
  """A stacked (pmap) tree as arrays on `mesh` with the same leading axis,
  one row per device (`P(axis names)`): per-device values moved as they are."""
  return jax.tree.map(lambda x: jax.device_put(
      np.asarray(x), NamedSharding(mesh, P(mesh.axis_names))), tree)


def to_devices(tree, devices):
  """Arrays on a mesh with one row per device, as pmap's stacked layout on
  `devices`: row i on device i, the input pmap takes."""
  mesh = jax.sharding.Mesh(np.array(list(devices)), ("devices",))
  return jax.device_put(jax.device_get(tree),
                        NamedSharding(mesh, P("devices")))


def device_key(key, axis_name: str):
  """This device's own key: `key` folded with its index along `axis_name`.

  The same call inside a pmap'd step and inside a shard_map'd port gives
  device i the same key, so their dropout masks agree; without it every
  device draws the same mask.
  """
  return jax.random.fold_in(key, jax.lax.axis_index(axis_name))
