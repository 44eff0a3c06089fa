"""A many-host pmap program whose step depends on each device's axis index.

An input of `python -m compare.rewrite` in tests/test_rewrite_many_hosts.py.
Each process joins the job (`jax.distributed`), makes its own rows of the
data and pmaps a step that does what flax's imagenet and vision_transformer
steps do with `lax.axis_index`: folds it into the dropout key, so that
every device draws its own mask; `psum`s each device's count of kept
examples; and `all_gather`s each device's loss, in the order of the axis.
So the numbers it prints depend on which device has which place on the
axis: pmap's order, every process's devices together and in process order.
Run as a script (one process, or each of several with COORDINATOR,
NUM_PROCESSES and PROCESS_ID set), it prints the same lines on every
process.
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


LEARNING_RATE = 0.05
KEEP = 0.75


@functools.partial(jax.pmap, axis_name='batch')
def update(params: Params, rng, xs: jnp.ndarray, ys: jnp.ndarray):
  """One SGD step with dropout on the examples, each device its own mask."""
  rng, step_rng = jax.random.split(rng)
  step_rng = jax.random.fold_in(step_rng, jax.lax.axis_index('batch'))
  keep = jax.random.bernoulli(step_rng, KEEP, xs.shape)

  def loss_fn(p):
    pred = p.weight * xs + p.bias
    return jnp.sum(jnp.where(keep, (pred - ys) ** 2, 0.0))

  loss, grads = jax.value_and_grad(loss_fn)(params)
  kept = jax.lax.psum(jnp.sum(keep.astype(jnp.float32)), axis_name='batch')
  grads = jax.tree.map(lambda g: jax.lax.psum(g, axis_name='batch') / kept,
                       grads)
  losses = jax.lax.all_gather(loss, axis_name='batch')
  new_params = jax.tree.map(
      lambda param, g: param - g * LEARNING_RATE, params, grads)
  return new_params, rng, losses, kept


def join():
  """Joins the job named by the environment (one process without it)."""
  if "COORDINATOR" in os.environ:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ["COORDINATOR"],
                               int(os.environ["NUM_PROCESSES"]),
                               int(os.environ["PROCESS_ID"]))


def main():
  join()
  # Each process makes its own 64 rows: a host reads its own shard.
  rows = np.random.default_rng(jax.process_index())
  xs = rows.normal(size=(64, 1)).astype(np.float32)
  ys = (xs * 2 - 1 + 0.5 * rows.normal(size=(64, 1))).astype(np.float32)

  params = Params(jnp.zeros(()), jnp.zeros(()))
  n_devices = jax.local_device_count()
  replicated_params = jax.tree.map(lambda x: jnp.array([x] * n_devices), params)
  # The same key on every device: the step folds each device's index in.
  rngs = jax.tree.map(lambda x: jnp.array([x] * n_devices),
                      jax.random.PRNGKey(0))

  def split(arr):
    """Splits the first axis of `arr` evenly across this host's devices."""
    return arr.reshape(n_devices, arr.shape[0] // n_devices, *arr.shape[1:])

  x_split = split(xs)
  y_split = split(ys)

  for i in range(6):
    replicated_params, rngs, losses, kept = update(replicated_params, rngs,
                                                   x_split, y_split)
    if i % 2 == 0:
      print(f"step {i} kept {float(kept[0])!r} losses "
            f"{[float(v) for v in losses[0]]!r}")

  params = jax.device_get(jax.tree.map(lambda x: x[0], replicated_params))
  print(f"w {float(params.weight)!r} b {float(params.bias)!r}")


if __name__ == "__main__":
  main()
