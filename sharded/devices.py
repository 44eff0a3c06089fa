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
