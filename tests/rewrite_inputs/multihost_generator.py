"""A flax training program fed by a generator through prefetch_to_device.

An input of `python -m compare.rewrite` in tests/test_rewrite_pipelines.py:
each process joins the job (`jax.distributed`) and reads its own rows; its
input pipeline is a generator that `shard`s each batch over the process's
devices, prefetched to them with `flax.jax_utils.prefetch_to_device`, as
flax's examples feed a pmap on many hosts. The pmap'd step donates the
state and averages the gradients and metrics over every device of every
process. Run as a script (one process, or each of several with
COORDINATOR, NUM_PROCESSES and PROCESS_ID set), it prints the metrics
every 2 steps and the sum of the parameters, on every process.
"""

import os

from flax import jax_utils
import flax.linen as nn
from flax.training import common_utils
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax


class Net(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(4)(nn.relu(nn.Dense(32)(x)))


def create_train_state(rng):
  model = Net()
  # Initialised under jit, as flax's imagenet example does: one compile,
  # not one per operation.
  params = jax.jit(model.init)(rng, jnp.ones((1, 16)))["params"]
  return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                       tx=optax.adam(1e-2))


def train_step(state, batch):
  """One step on this device's rows; gradients and metrics averaged."""

  def loss_fn(params):
    logits = state.apply_fn({"params": params}, batch["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()
    return loss, logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  grads = jax.lax.pmean(grads, axis_name="batch")
  metrics = jax.lax.pmean(
      {"loss": loss,
       "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["y"])},
      axis_name="batch")
  return state.apply_gradients(grads=grads), metrics


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))


def host_batches(steps, host_batch_size):
  """This process's rows of each global batch, split over its devices."""
  rng = np.random.default_rng(100 + jax.process_index())
  for _ in range(steps):
    x = rng.normal(size=(host_batch_size, 16)).astype(np.float32)
    batch = {"x": x, "y": x[:, :4].argmax(-1).astype(np.int32)}
    yield common_utils.shard(batch)


def join():
  """Joins the job named by the environment (one process without it)."""
  if "COORDINATOR" in os.environ:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ["COORDINATOR"],
                               int(os.environ["NUM_PROCESSES"]),
                               int(os.environ["PROCESS_ID"]))


def main(steps=6):
  join()
  state = jax_utils.replicate(create_train_state(jax.random.key(0)))
  batches = jax_utils.prefetch_to_device(
      host_batches(steps, 8 * jax.local_device_count()), 2)
  for step in range(steps):
    batch = next(batches)
    state, metrics = p_train_step(state, batch)
    if step % 2 == 0:
      metrics = jax.device_get(jax_utils.unreplicate(metrics))
      print(f"step {step} loss {float(metrics['loss'])!r} "
            f"accuracy {float(metrics['accuracy'])!r}")
  params = jax.device_get(jax_utils.unreplicate(state.params))
  total = sum(float(np.sum(x)) for x in jax.tree.leaves(params))
  print(f"sum of params {total!r}")


if __name__ == "__main__":
  main()
