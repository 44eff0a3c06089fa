"""Bytes of a run's train state on each of this process's devices."""

import math

import jax


def state_bytes_per_device(state) -> dict[int, int]:
  """Bytes of params + optimiser state on each of this process's devices.

  Read from each leaf's sharding (the shard shape it puts on each device),
  so a state whose buffers were donated to a later step still answers. A
  state without `params` and `opt_state` fields counts every array leaf.

  Returns:
    `{device id: bytes}`.
  """
  held = ((state.params, state.opt_state)
          if hasattr(state, "params") and hasattr(state, "opt_state")
          else state)
  per = {}
  for leaf in jax.tree.leaves(held):
    if not isinstance(leaf, jax.Array):
      continue
    shard = math.prod(leaf.sharding.shard_shape(leaf.shape))
    for device in leaf.sharding.addressable_devices:
      per[device.id] = per.get(device.id, 0) + shard * leaf.dtype.itemsize
  return per
