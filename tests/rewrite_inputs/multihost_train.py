"""A flax data-parallel training program written for many hosts.

An input of `python -m compare.rewrite` in tests/test_rewrite_many_hosts.py:
each process joins the job (`jax.distributed`) and reads its own batches; a
TrainState with BatchNorm statistics is `replicate`d over the process's
devices, each batch `shard`ed over them; the pmap'd step donates the state
and averages gradients, BatchNorm statistics (`axis_name`) and metrics over
every device of every process; `unreplicate` reads the state back. Run as a
script (one process, or each of several with COORDINATOR, NUM_PROCESSES and
PROCESS_ID set), it prints the metrics every 5 steps and the sums of the
parameters and statistics, on every process.
"""

import os
from typing import Any

from flax import jax_utils
import flax.linen as nn
from flax.training import common_utils
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax


class Net(nn.Module):
  """Dense, BatchNorm (statistics over every device), Dense."""

  @nn.compact
  def __call__(self, x, train: bool = True):
    x = nn.Dense(32)(x)
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                     axis_name="batch")(x)
    return nn.Dense(4)(nn.relu(x))


class TrainState(train_state.TrainState):
  batch_stats: Any


def create_train_state(rng):
  model = Net()
  variables = model.init(rng, jnp.ones((1, 16)), train=False)
  return TrainState.create(apply_fn=model.apply, params=variables["params"],
                           batch_stats=variables["batch_stats"],
                           tx=optax.adamw(1e-2, weight_decay=1e-4))


def train_step(state, batch):
  """One step on this device's rows; everything averaged over devices."""

  def loss_fn(params):
    logits, updates = state.apply_fn(
        {"params": params, "batch_stats": state.batch_stats}, batch["x"],
        mutable=["batch_stats"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()
    return loss, (logits, updates)

  (loss, (logits, updates)), grads = jax.value_and_grad(
      loss_fn, has_aux=True)(state.params)
  grads = jax.lax.pmean(grads, axis_name="batch")
  metrics = jax.lax.pmean(
      {"loss": loss,
       "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["y"])},
      axis_name="batch")
  state = state.apply_gradients(grads=grads,
                                batch_stats=updates["batch_stats"])
  return state, metrics


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))


def host_batches(steps, host_batch_size):
  """This process's batches: its own rows of each global batch."""
  rng = np.random.default_rng(100 + jax.process_index())
  for _ in range(steps):
    x = rng.normal(size=(host_batch_size, 16)).astype(np.float32)
    yield {"x": x, "y": (x[:, :4].argmax(-1)).astype(np.int32)}


def join():
  """Joins the job named by the environment (one process without it)."""
  if "COORDINATOR" in os.environ:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ["COORDINATOR"],
                               int(os.environ["NUM_PROCESSES"]),
                               int(os.environ["PROCESS_ID"]))


def main(steps=15):
  join()
  state = jax_utils.replicate(create_train_state(jax.random.key(0)))
  for step, batch in enumerate(host_batches(steps, 8 * jax.local_device_count())):
    state, metrics = p_train_step(state, common_utils.shard(batch))
    if step % 5 == 0:
      metrics = jax.device_get(jax_utils.unreplicate(metrics))
      print(f"step {step} loss {float(metrics['loss'])!r} "
            f"accuracy {float(metrics['accuracy'])!r}")
  state = jax.device_get(jax_utils.unreplicate(state))
  for name in ("params", "batch_stats"):
    total = sum(float(np.sum(x)) for x in jax.tree.leaves(getattr(state, name)))
    print(f"sum of {name} {total!r}")


if __name__ == "__main__":
  main()
