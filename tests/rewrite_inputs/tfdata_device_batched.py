"""A flax program fed by a tf.data pipeline that batches per device.

An input of `python -m compare.rewrite --global` (issue 74), written as
flax's imagenet family feeds pmap: each process reads its shard of a
`tf.data` dataset (`ds.shard(jax.process_count(), jax.process_index())`),
batches it per device and then by `jax.local_device_count()`, so each
step's batch arrives stacked `[devices, per_device, ...]` from tf.data
itself; `create_input_iter` turns the tensors into numpy and prefetches
them to the devices with `flax.jax_utils.prefetch_to_device`. The pmap'd
step donates the state and averages gradients and metrics over every
device of every process. Run as a script (one process, or each of several
with COORDINATOR, NUM_PROCESSES and PROCESS_ID set) with tensorflow
installed, it prints the metrics every step and the sum of the
parameters, on every process. Run by bench/probes/rewrite_tfdata.py
(tensorflow is not installed in CI: tests/test_rewrite_tfdata.py reads
the rewrite's text only).
"""

import os

from flax import jax_utils
import flax.linen as nn
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tensorflow as tf

PER_DEVICE = 4
EXAMPLES = 512


class Net(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(4)(nn.tanh(nn.Dense(32)(x)))


def create_train_state(rng):
  model = Net()
  params = jax.jit(model.init)(rng, jnp.ones((1, 8)))["params"]
  return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                       tx=optax.adam(1e-2))


def create_split(seed):
  """This process's shard of the examples, batched per device and then by
  this process's devices: `[devices, PER_DEVICE, ...]` a step."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(EXAMPLES, 8)).astype(np.float32)
  ds = tf.data.Dataset.from_tensor_slices(
      {"x": x, "y": x[:, :4].argmax(-1).astype(np.int32)})
  ds = ds.shard(jax.process_count(), jax.process_index())
  ds = ds.repeat()
  ds = ds.batch(PER_DEVICE, drop_remainder=True)
  ds = ds.batch(jax.local_device_count(), drop_remainder=True)
  return ds.prefetch(2)


def create_input_iter(seed):
  ds = create_split(seed)
  it = map(lambda xs: jax.tree.map(lambda x: x._numpy(), xs), ds)  # pylint: disable=protected-access
  it = jax_utils.prefetch_to_device(it, 2)
  return it


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


def join():
  """Joins the job named by the environment (one process without it)."""
  if "COORDINATOR" in os.environ:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ["COORDINATOR"],
                               int(os.environ["NUM_PROCESSES"]),
                               int(os.environ["PROCESS_ID"]))


def main(steps=5):
  join()
  state = jax_utils.replicate(create_train_state(jax.random.key(0)))
  train_iter = create_input_iter(0)
  for step in range(steps):
    batch = next(train_iter)
    state, metrics = p_train_step(state, batch)
    metrics = jax.device_get(jax_utils.unreplicate(metrics))
    print(f"step {step} loss {float(metrics['loss'])!r} "
          f"accuracy {float(metrics['accuracy'])!r}")
  params = jax.device_get(jax_utils.unreplicate(state.params))
  total = sum(float(np.sum(x)) for x in jax.tree.leaves(params))
  print(f"sum of params {total!r}")


if __name__ == "__main__":
  main()
