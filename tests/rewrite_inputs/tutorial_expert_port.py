"""The JAX pmap tutorial's linear regression, ported to global arrays by hand.

What a JAX engineer writes for tutorial_linear_regression.py (issue 58),
shown beside `python -m compare.rewrite --global`'s output in
docs/REWRITE.md; tests/test_rewrite_global_tidy.py checks that it prints
the tutorial's numbers, digit for digit.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

# One axis over every device; Auto, so jit may place what it is given.
mesh = jax.make_mesh((jax.device_count(),), ("num_devices",),
                     axis_types=(jax.sharding.AxisType.Auto,))


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


# The body runs on each device's rows, as pmap's did. check_vma=False: with
# jax's check the gradient of the replicated params arrives already summed
# over devices, and the pmean below would leave it 8 times too large.
@jax.jit
@functools.partial(jax.shard_map, mesh=mesh,
                   in_specs=(P(), P("num_devices"), P("num_devices")),
                   out_specs=(P(), P()), check_vma=False)
def update(params: Params, xs: jnp.ndarray, ys: jnp.ndarray):
  """Performs one SGD update step on params using the given data."""
  loss, grads = jax.value_and_grad(loss_fn)(params, xs, ys)
  # Combine the gradient and the loss across all devices.
  grads = jax.lax.pmean(grads, axis_name="num_devices")
  loss = jax.lax.pmean(loss, axis_name="num_devices")
  new_params = jax.tree.map(
      lambda param, g: param - g * LEARNING_RATE, params, grads)
  return new_params, loss


def main():
  # Generate true data from y = w*x + b + noise
  true_w, true_b = 2, -1
  xs = np.random.default_rng(0).normal(size=(128, 1)).astype(np.float32)
  noise = 0.5 * np.random.default_rng(1).normal(size=(128, 1))
  ys = (xs * true_w + true_b + noise).astype(np.float32)

  # The params placed once on every device; the data split by rows.
  params = jax.device_put(init(jax.random.key(123)), NamedSharding(mesh, P()))
  rows = NamedSharding(mesh, P("num_devices"))
  xs, ys = jax.device_put(xs, rows), jax.device_put(ys, rows)

  for i in range(100):
    params, loss = update(params, xs, ys)
    if i % 20 == 0:
      print(f"Step {i:3d}, loss: {float(loss)!r}")

  params = jax.device_get(params)
  print(f"w {float(params.weight)!r} b {float(params.bias)!r}")


if __name__ == "__main__":
  main()
