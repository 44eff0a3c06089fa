"""The classic program: data-parallel ResNet training on digits with jax.pmap.

Written as teams wrote it for pmap: a replicated train state
(`flax.jax_utils.replicate`), host batches reshaped to `[devices, b, ...]`,
BatchNorm statistics averaged over the mapped axis, and the running averages
synced before evaluation as in flax's imagenet example.
"""

import functools

import flax.jax_utils
import jax
from jax import lax

from examples.resnet import data
from examples.resnet.model import ResNet
from examples.resnet.state import create_train_state
from examples.resnet.state import evaluate
from examples.resnet.state import loss_and_metrics

model = ResNet(axis_name="batch")


def train_step(state, batch):
  """One optimizer step on this device's slice of the global batch."""
  # A dropout mask per step and per device: without the device index every
  # device would drop the same units of its examples.
  dropout_key = jax.random.fold_in(
      jax.random.fold_in(state.key, state.step), jax.lax.axis_index("batch"))
  grad_fn = jax.value_and_grad(
      functools.partial(loss_and_metrics, model), has_aux=True)
  (_, (metrics, new_batch_stats)), grads = grad_fn(
      state.params, state.batch_stats, batch, dropout_key)
  # Each device differentiated the mean over its own examples; the mean of
  # those is the gradient of the global mean (equal slices).
  grads = jax.lax.pmean(grads, "batch")
  metrics = jax.lax.pmean(metrics, "batch")
  state = state.apply_gradients(grads=grads, batch_stats=new_batch_stats)
  return state, metrics


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))

cross_replica_mean = jax.pmap(lambda x: lax.pmean(x, "x"), "x")


def sync_batch_stats(state):
  """Averages the replicas' BatchNorm running statistics (flax imagenet)."""
  # BatchNorm's pmean already keeps the copies equal; the sync is the
  # classic belt and braces before evaluating or checkpointing one copy.
  return state.replace(batch_stats=cross_replica_mean(state.batch_stats))


def shard(batch, n_devices):
  """A global host batch as `[n_devices, batch // n_devices, ...]`."""
  return jax.tree.map(
      lambda x: x.reshape((n_devices, -1) + x.shape[1:]), batch)


def train(state, steps: int):
  """Trains a host state for `steps` steps on all local devices.

  Args:
    state: The initial state, one host copy (`create_train_state`).
    steps: Number of optimizer steps; step `i` reads `data.host_batch(i)`.

  Returns:
    `(state, metrics)`: the final state, still replicated and synced, and
    the last step's metrics (host floats).
  """
  n_devices = jax.local_device_count()
  # As classic programs call it. On jax 0.10 pmap returns arrays on a mesh
  # named "batch", and replicate's is "_device_put_sharded", so step 2
  # compiles again; replicate(state, axis_name="batch") would avoid that.
  state = flax.jax_utils.replicate(state)
  metrics = None
  for step in range(steps):
    batch = shard(data.host_batch(step), n_devices)
    state, metrics = p_train_step(state, batch)
  state = sync_batch_stats(state)
  return state, jax.tree.map(float, flax.jax_utils.unreplicate(metrics))


def main(steps: int = 30):
  """Trains from seed 0 and prints the test metrics."""
  state, metrics = train(create_train_state(0, steps), steps)
  print(f"last step: {metrics}")
  print(f"test: {evaluate(flax.jax_utils.unreplicate(state))}")


if __name__ == "__main__":
  main()
