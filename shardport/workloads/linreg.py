"""The pmap tutorial's linear regression, `y = w*x + b + noise`.

Its update is hand-written SGD over the params pytree (`jax.tree.map`), as in
the tutorial; no optax.
"""

import flax.struct
import jax
import jax.numpy as jnp


def init_params(key, inputs_B1=None):
  """Weight and bias drawn from N(0, 1), as in the tutorial."""
  del inputs_B1  # the model has no shape to infer
  weight_key, bias_key = jax.random.split(key)
  return {"weight": jax.random.normal(weight_key, ()),
          "bias": jax.random.normal(bias_key, ())}


def predict(params, inputs_B1):
  return params["weight"] * inputs_B1 + params["bias"]


def squared_error_sum(params, inputs_B1, targets_B1):
  return jnp.sum((predict(params, inputs_B1) - targets_B1) ** 2)


class SGDState(flax.struct.PyTreeNode):
  """Params plus a step count, updated by plain SGD without optax."""

  step: jax.Array
  params: dict
  opt_state: tuple = ()
  learning_rate: float = flax.struct.field(pytree_node=False, default=0.005)

  def apply_gradients(self, *, grads):
    params = jax.tree.map(lambda p, g: p - self.learning_rate * g,
                          self.params, grads)
    return self.replace(step=self.step + 1, params=params)
