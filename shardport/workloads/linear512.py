"""The gradient-accumulation classic: one dense layer, squared error summed.

Random 512-dim vectors are fit to random booleans with Adam; the classic
program takes batches of 64 in 16 microbatches of 4 on one device.
"""

import flax.linen as nn
import jax.numpy as jnp


class Linear(nn.Module):
  """One dense layer to a single output."""

  @nn.compact
  def __call__(self, inputs_BF):
    return nn.Dense(features=1)(inputs_BF)


def squared_error_sum(outputs_B1, targets_B1):
  """Squared error summed (not averaged) over the batch."""
  return jnp.sum((outputs_B1 - targets_B1) ** 2)


def correct_count(outputs_B1, targets_B1):
  """How many outputs fall on the target's side of 0.5."""
  return jnp.sum((outputs_B1 > 0.5) == (targets_B1 > 0.5))
