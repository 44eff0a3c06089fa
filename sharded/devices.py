"""Device plumbing for jax.sharding: a named mesh and shardings on it."""

import jax
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "data"


class DeviceError(ValueError):
  """More devices asked for than exist."""


def placement(n_devices: int) -> jax.sharding.Mesh:
  """A 1-D mesh over the first `n_devices` local devices.

  The axis is `Auto`, not `make_mesh`'s default `Explicit`: the `jit` variant
  is defined as "the compiler places the collectives", which is what Auto
  propagation does, and pmap's own internal mesh is Auto too, so arrays move
  between the backends without resharding errors. shard_map states its
  shardings explicitly (`in_specs`/`out_specs`) either way.
  """
  available = jax.local_devices()
  if not 1 <= n_devices <= len(available):
    raise DeviceError(f"asked for {n_devices} devices, {len(available)} exist")
  return jax.make_mesh((n_devices,), (AXIS,), axis_types=(AxisType.Auto,),
                       devices=available[:n_devices])


def replicate(tree, where):
  """One logical copy of `tree`, replicated over the mesh (no device axis)."""
  return jax.device_put(tree, NamedSharding(where, P()))


def shard_batch(batch, where):
  """Places a global host batch split along its leading axis over the mesh."""
  return jax.device_put(batch, NamedSharding(where, P(AXIS)))


def fetch(tree):
  """Numpy copy of a tree (already without a device axis)."""
  return jax.device_get(tree)


# region: restore-placement
def to_checkpoint(tree):
  """The tree as a checkpoint holds it: already one copy (`P()`), as is."""
  return tree


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


class EnsembleSizeError(ValueError):
  """An ensemble size that the backend cannot lay out on its devices."""


def ensemble_placement(n_devices: int) -> jax.sharding.Mesh:
  """A 1-D mesh whose `ensemble` axis splits the members over the devices.

  Auto, for the reasons given in `placement`; shard_map states every
  sharding of the ensemble step explicitly.
  """
  return jax.sharding.Mesh(placement(n_devices).devices, (ENSEMBLE_AXIS,),
                           axis_types=(AxisType.Auto,))


def check_members(members: int, where) -> None:
  """Raises EnsembleSizeError unless each device holds as many members."""
  n_devices = where.shape[ENSEMBLE_AXIS]
  if members < 1 or members % n_devices:
    raise EnsembleSizeError(
        f"the sharded ensemble needs a positive multiple of the device count "
        f"({n_devices}) members, got {members}")


def fetch_members(tree):
  """Numpy copy of a per-member tree (its leading axis is the member axis)."""
  return jax.device_get(tree)


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
