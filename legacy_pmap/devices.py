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
  # Not flax.jax_utils.unreplicate: on one device it sees a "fully
  # replicated" [1, ...] array and keeps the device axis (flax 0.12.8).
  return jax.tree.map(lambda x: x[0], jax.device_get(tree))


ENSEMBLE_AXIS = "ensemble"


class EnsembleSizeError(ValueError):
  """An ensemble size that the backend cannot lay out on its devices."""


def ensemble_placement(n_devices: int) -> list[jax.Device]:
  """The devices of an ensemble, one member each (pmap names the axis later)."""
  return placement(n_devices)


def members_per_device(members: int, where) -> int:
  """How many members each device holds: pmap maps exactly one per device."""
  if members != len(where):
    raise EnsembleSizeError(
        f"the pmap ensemble runs exactly one member per device: asked for "
        f"{members} members on {len(where)} devices (use --members "
        f"{len(where)}, or the sharded port, which takes any multiple of the "
        "device count)")
  return 1


def fetch_members(tree):
  """Numpy copy of a per-member tree: the device axis is the member axis."""
  return jax.device_get(tree)
