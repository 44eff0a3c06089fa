"""Device plumbing for jax.sharding: a named mesh and shardings on it."""

import jax
from jax.experimental import multihost_utils
import numpy as np
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shardport.workloads import configs
from shardport.workloads import ensemble

AXIS = "data"
BACKEND = "sharded"
STEP_TAKES_HOST_LOCAL = False


# region: many-hosts-port
def placement(n_devices: int) -> jax.sharding.Mesh:
  """A 1-D mesh over the first `n_devices` local devices of every process.

  With many processes the mesh is global, process after process (the order
  of pmap's axis), so that the global batch splits over it as under pmap.

  The axis is `Auto`, not `make_mesh`'s default `Explicit`: the `jit` variant
  is defined as "the compiler places the collectives", which is what Auto
  propagation does, and pmap's own internal mesh is Auto too, so arrays move
  between the backends without resharding errors. shard_map states its
  shardings explicitly (`in_specs`/`out_specs`) either way.
  """
  available = jax.local_devices()
  if not 1 <= n_devices <= len(available):
    raise configs.DeviceError(f"asked for {n_devices} devices, {len(available)} exist")
  devices = [device for process in range(jax.process_count())
             for device in jax.local_devices(process)[:n_devices]]
  return jax.sharding.Mesh(np.array(devices), (AXIS,),
                           axis_types=(AxisType.Auto,))


def _global(x, sharding):
  """`x`, the same whole value in every process, as a global array.

  Each process fills its own devices' shards from its copy: nothing crosses
  processes (`jax.device_put` of a host value onto a global sharding would
  first check, with a collective, that every process passed the same value).
  """
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda i: x[i])


def replicate(tree, where):
  """One logical copy of `tree`, replicated over the mesh (no device axis)."""
  return jax.tree.map(lambda x: _global(x, NamedSharding(where, P())), tree)


def shard_batch(batch, where):
  """This process's rows of the global batch, as one global array.

  In one process the rows are the whole global batch; with many, each
  process reads only its slice (`shardport.workloads.batches.process_slice`) and the
  global array is assembled from the slices, in process order.
  """
  sharding = NamedSharding(where, P(AXIS))
  return jax.tree.map(
      lambda x: jax.make_array_from_process_local_data(sharding, x), batch)


def shard_members(tree, where):
  """A host tree with one row per member (the same in every process), split
  over the mesh's first axis: a global array, each process its devices' rows."""
  sharding = NamedSharding(where, P(where.axis_names[0]))

  def put(x):
    if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      return _global(x, sharding)
    return jax.random.wrap_key_data(_global(jax.random.key_data(x), sharding),
                                    impl=jax.random.key_impl(x))

  return jax.tree.map(put, tree)
# endregion


def fetch(tree):
  """Numpy copy of a tree (already without a device axis)."""
  return jax.device_get(tree)


# region: restore-placement
def to_checkpoint(tree):
  """The tree as a checkpoint holds it: one copy, on the host.

  Each leaf is replicated (`P()`): its first local copy, one transfer per
  leaf, as the pmap backend saves. Given the replicated `jax.Array`s
  instead, Orbax splits each into per-device slices to write in parallel,
  which on CPU compiles a slice per leaf and device on the first save
  (seconds) to write a few kilobytes.
  """
  return jax.tree.map(lambda x: jax.device_get(x.addressable_shards[0].data),
                      tree)


def checkpoint_target(tree):
  """Orbax restore targets: each leaf's own shape and `NamedSharding`."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=x.sharding), tree)


def from_checkpoint(tree, like):
  """A restored tree: Orbax already placed it on `like`'s shardings."""
  del like
  return tree
# endregion


ENSEMBLE_AXIS = "ensemble"


def ensemble_placement(n_devices: int) -> jax.sharding.Mesh:
  """A 1-D mesh whose `ensemble` axis splits the members over the devices.

  Auto, for the reasons given in `placement`; shard_map states every
  sharding of the ensemble step explicitly.
  """
  return jax.sharding.Mesh(placement(n_devices).devices, (ENSEMBLE_AXIS,),
                           axis_types=(AxisType.Auto,))


class MemberCheckpoints:
  """An ensemble's state as a checkpoint holds it: every member, the member
  axis leading (`shardport.training.checkpoints.Layout`). The port's state already is
  one global array of all the members: Orbax writes it cooperatively, each
  process its own rows, and restores it onto the same shardings.
  """

  @staticmethod
  def to_checkpoint(tree):
    return tree

  @staticmethod
  def checkpoint_target(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
        x.shape, x.dtype, sharding=x.sharding), tree)

  @staticmethod
  def from_checkpoint(tree, like):
    del like
    return tree


# The axes of an ensemble whose members each train data-parallel:
# the nested pmap's outer and inner axis names, as mesh axes.
MEMBERS_AXIS, DATA_AXIS = "members", AXIS


def member_data_mesh(where, members: int) -> jax.sharding.Mesh:
  """A 2-D `members` x `data` mesh over `where`'s devices, in their order.

  Member m's row is devices m * D to (m + 1) * D - 1 of `where`, as the
  nested pmap lays them out. Auto, for the reasons given in `placement`.
  Raises a DeviceError or EnsembleSizeError (one line) where no such mesh
  fits `where`.
  """
  shape = ensemble.mesh_shape(members, where.size)
  return jax.sharding.Mesh(where.devices.reshape(shape),
                           (MEMBERS_AXIS, DATA_AXIS),
                           axis_types=(AxisType.Auto,) * 2)


# region: many-hosts-port-members
def fetch_members(tree):
  """Numpy copy of a per-member tree (its leading axis is the member axis).

  With many processes each holds only its devices' members:
  `process_allgather` brings every member to every process.
  """
  if jax.process_count() > 1:
    return multihost_utils.process_allgather(tree, tiled=True)
  return jax.device_get(tree)
# endregion


MERGE_ENV = "JAX_PMAP_SHMAP_MERGE"


def pmap_runtime() -> str:
  """What runs this backend's per-device programs: always `"shard_map"`.

  The port calls no `jax.pmap`, so `JAX_PMAP_SHMAP_MERGE` does not concern it;
  `legacy_pmap.devices.pmap_runtime` tells which runtime the pmap backend it
  is compared against runs on.

  Returns:
    `"shard_map"`.
  """
  return "shard_map"


def pmap_runtime_warning() -> str | None:
  """None: no setting of `JAX_PMAP_SHMAP_MERGE` changes what the port runs.

  Returns:
    None (`legacy_pmap.devices.pmap_runtime_warning` reports the switch).
  """
  return None
