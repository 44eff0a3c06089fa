"""Device plumbing for pmap: device lists, a leading device axis, replicas."""

import einops
import flax.jax_utils
import jax
import numpy as np

AXIS = "batch"


class DeviceError(ValueError):
  """More devices asked for than exist."""


def placement(n_devices: int) -> list[jax.Device]:
  """The first `n_devices` local devices, in the order pmap uses them."""
  available = jax.local_devices()
  if not 1 <= n_devices <= len(available):
    raise DeviceError(f"asked for {n_devices} devices, {len(available)} exist")
  return available[:n_devices]


def replicate(tree, where):
  """One copy of `tree` per device, stacked on a new leading axis."""
  return flax.jax_utils.replicate(tree, devices=where)


def shard_batch(batch, where):
  """Splits a global host batch to `[n_devices, local_batch, ...]` on devices."""
  # jax.device_put_sharded is gone in jax 0.10; this is what
  # flax.jax_utils.replicate does internally, without the copies.
  mesh = jax.sharding.Mesh(np.array(where), (AXIS,))
  sharding = jax.sharding.NamedSharding(mesh, jax.P(AXIS))
  split = lambda x: einops.rearrange(x, "(d b) ... -> d b ...", d=len(where))
  return jax.device_put(jax.tree.map(split, batch), sharding)


def fetch(tree):
  """Numpy copy of a replicated tree, without its device axis."""
  return jax.device_get(flax.jax_utils.unreplicate(tree))
