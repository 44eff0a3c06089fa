"""The pmap tutorial's linear regression, its inputs augmented per device.

As the tutorial writes it, but each device adds its own noise to its rows,
from a key folded with `lax.axis_index` (as flax's imagenet and
vision_transformer fold it into their dropout keys): the step's numbers
depend on which device holds which rows, so a port whose mesh orders the
devices otherwise computes other numbers. tests/test_rewrite_many_hosts.py
proves its `--global` rewrite in 2 processes x 4 devices.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Params(NamedTuple):
  weight: jnp.ndarray
  bias: jnp.ndarray


def init(rng) -> Params:
  """Returns the initial model params."""
  weights_key, bias_key = jax.random.split(rng)
  weight = jax.random.normal(weights_key, ())
  bias = jax.random.normal(bias_key, ())
  return Params(weight, bias)


def loss_fn(params: Params, xs: jnp.ndarray, ys: jnp.ndarray) -> jnp.ndarray:
  """Computes the least squares error of the model's predictions on x."""
  pred = params.weight * xs + params.bias
  return jnp.mean((pred - ys) ** 2)


LEARNING_RATE = 0.005


# So far, the code is identical to the single-device case. Here's what's new:


# Remember that the `axis_name` is just an arbitrary string label used
# to later tell `jax.lax.pmean` which axis to reduce over. Here, we call it
# 'num_devices', but could have used anything, so long as `pmean` used the same.
@functools.partial(jax.pmap, axis_name='num_devices')
def update(params: Params, xs: jnp.ndarray, ys: jnp.ndarray):
  """Performs one SGD update step on params using the given data."""

  # Each device its own augmentation noise.
  key = jax.random.fold_in(jax.random.key(7),
                           jax.lax.axis_index('num_devices'))
  xs = xs + 0.1 * jax.random.normal(key, xs.shape)

  # Compute the gradients on the given minibatch (individually on each device).
  loss, grads = jax.value_and_grad(loss_fn)(params, xs, ys)

  # Combine the gradient across all devices (by taking their mean).
  grads = jax.lax.pmean(grads, axis_name='num_devices')

  # Also combine the loss. Unnecessary for the update, but useful for logging.
  loss = jax.lax.pmean(loss, axis_name='num_devices')

  # Each device performs its own update, but since we start with the same params
  # and synchronise gradients, the params stay in sync.
  new_params = jax.tree.map(
      lambda param, g: param - g * LEARNING_RATE, params, grads)

  return new_params, loss


def main():
  # Generate true data from y = w*x + b + noise
  true_w, true_b = 2, -1
  xs = np.random.default_rng(0).normal(size=(128, 1)).astype(np.float32)
  noise = 0.5 * np.random.default_rng(1).normal(size=(128, 1))
  ys = (xs * true_w + true_b + noise).astype(np.float32)

  # Initialise parameters and replicate across devices.
  params = init(jax.random.key(123))
  n_devices = jax.local_device_count()
  replicated_params = jax.tree.map(lambda x: jnp.array([x] * n_devices), params)

  # Split the data into chunks for each device.
  def split(arr):
    """Splits the first axis of `arr` evenly across the number of devices."""
    return arr.reshape(n_devices, arr.shape[0] // n_devices, *arr.shape[1:])

  x_split = split(xs)
  y_split = split(ys)

  for i in range(100):
    # This is where the params and data gets communicated to devices:
    replicated_params, loss = update(replicated_params, x_split, y_split)

    # The loss is the same on every device; print the first one.
    if i % 20 == 0:
      print(f"Step {i:3d}, loss: {float(loss[0])!r}")

  # Like the loss, the leaves of params have an extra leading dimension,
  # so we take the params from the first device.
  params = jax.device_get(jax.tree.map(lambda x: x[0], replicated_params))
  print(f"w {float(params.weight)!r} b {float(params.bias)!r}")


if __name__ == "__main__":
  main()
