"""The pmap tutorial's program, as written there: a `Params` NamedTuple,
`update(params, xs, ys) -> (params, loss)` pmap'd over `num_devices`."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

LEARNING_RATE = 0.005


class Params(NamedTuple):
  weight: jnp.ndarray
  bias: jnp.ndarray


def init(rng) -> Params:
  """Returns the initial model params."""
  weights_key, bias_key = jax.random.split(rng)
  weight = jax.random.normal(weights_key, ())
  bias = jax.random.normal(bias_key, ())
  return Params(weight, bias)


def loss_fn(params: Params, xs: jnp.ndarray, ys: jnp.ndarray):
  """Computes the least squares error of the model's predictions on x."""
  pred = params.weight * xs + params.bias
  return jnp.mean((pred - ys) ** 2)


def update_body(params: Params, xs: jnp.ndarray, ys: jnp.ndarray,
                axis_name: str = "num_devices"):
  """One SGD step; the gradients averaged over the devices."""
  loss, grads = jax.value_and_grad(loss_fn)(params, xs, ys)
  grads = jax.lax.pmean(grads, axis_name=axis_name)
  loss = jax.lax.pmean(loss, axis_name=axis_name)
  new_params = jax.tree.map(
      lambda param, g: param - g * LEARNING_RATE, params, grads)
  return new_params, loss


@functools.partial(jax.pmap, axis_name="num_devices")
def update(params: Params, xs: jnp.ndarray, ys: jnp.ndarray):
  return update_body(params, xs, ys)


def data(rows=128, seed=0):
  """The tutorial's data: y = 3x - 1 with noise."""
  rng = np.random.default_rng(seed)
  xs = rng.normal(size=(rows,)).astype(np.float32)
  noise = 0.5 * rng.normal(size=(rows,)).astype(np.float32)
  return xs, (3 * xs - 1 + noise).astype(np.float32)
