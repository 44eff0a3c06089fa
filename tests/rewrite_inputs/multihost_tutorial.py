"""The JAX pmap tutorial's linear regression, written for many hosts.

An input of `python -m compare.rewrite` in tests/test_rewrite_many_hosts.py:
each process joins the job (`jax.distributed`), makes its own rows of the
data, replicates the parameters over its devices and splits its rows over
them; the pmap'd step averages over every device of every process. Run as a
script (one process, or each of several with COORDINATOR, NUM_PROCESSES and
PROCESS_ID set), it prints the loss every 20 steps and the learned
parameters, on every process.
"""

import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Params(NamedTuple):
  weight: jnp.ndarray
  bias: jnp.ndarray


def init(rng) -> Params:
  weights_key, bias_key = jax.random.split(rng)
  return Params(jax.random.normal(weights_key, ()),
                jax.random.normal(bias_key, ()))


def loss_fn(params: Params, xs: jnp.ndarray, ys: jnp.ndarray) -> jnp.ndarray:
  pred = params.weight * xs + params.bias
  return jnp.mean((pred - ys) ** 2)


LEARNING_RATE = 0.005


@functools.partial(jax.pmap, axis_name='num_devices')
def update(params: Params, xs: jnp.ndarray, ys: jnp.ndarray):
  """One SGD step; gradients and loss averaged over every device."""
  loss, grads = jax.value_and_grad(loss_fn)(params, xs, ys)
  grads = jax.lax.pmean(grads, axis_name='num_devices')
  loss = jax.lax.pmean(loss, axis_name='num_devices')
  new_params = jax.tree.map(
      lambda param, g: param - g * LEARNING_RATE, params, grads)
  return new_params, loss


def join():
  """Joins the job named by the environment (one process without it)."""
  if "COORDINATOR" in os.environ:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ["COORDINATOR"],
                               int(os.environ["NUM_PROCESSES"]),
                               int(os.environ["PROCESS_ID"]))


def main():
  join()
  # Each process makes its own 128 rows: a host reads its own shard.
  rows = np.random.default_rng(jax.process_index())
  xs = rows.normal(size=(128, 1)).astype(np.float32)
  ys = (xs * 2 - 1 + 0.5 * rows.normal(size=(128, 1))).astype(np.float32)

  params = init(jax.random.key(123))
  n_devices = jax.local_device_count()
  replicated_params = jax.tree.map(lambda x: jnp.array([x] * n_devices), params)

  def split(arr):
    """Splits the first axis of `arr` evenly across this host's devices."""
    return arr.reshape(n_devices, arr.shape[0] // n_devices, *arr.shape[1:])

  x_split = split(xs)
  y_split = split(ys)

  for i in range(60):
    replicated_params, loss = update(replicated_params, x_split, y_split)
    if i % 20 == 0:
      print(f"Step {i:3d}, loss: {float(loss[0])!r}")

  params = jax.device_get(jax.tree.map(lambda x: x[0], replicated_params))
  print(f"w {float(params.weight)!r} b {float(params.bias)!r}")


if __name__ == "__main__":
  main()
