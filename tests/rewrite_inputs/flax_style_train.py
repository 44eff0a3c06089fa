"""A training script in the flax examples' style: a TrainState replicated
with `flax.jax_utils.replicate`, batches through `common_utils.shard` and
`prefetch_to_device`, a pmap'd step that donates the state, `unreplicate`
at the end.

An input of `python -m compare.rewrite` in tests/test_rewrite.py: run as a
script, it prints the metrics every 10 steps and the final parameters' sum.
"""

import functools

from flax import jax_utils
import flax.linen as nn
from flax.training import common_utils
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax


class MLP(nn.Module):
  """Two dense layers."""

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(32)(x))
    return nn.Dense(4)(x)


def create_train_state(rng):
  model = MLP()
  params = model.init(rng, jnp.ones((1, 16)))["params"]
  tx = optax.sgd(0.1, momentum=0.9)
  return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                       tx=tx)


def train_step(state, batch):
  """One step on this device's slice; gradients averaged over devices."""

  def loss_fn(params):
    logits = state.apply_fn({"params": params}, batch["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()
    return loss, logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  grads = jax.lax.pmean(grads, axis_name="batch")
  metrics = {"loss": loss,
             "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["y"])}
  metrics = jax.lax.pmean(metrics, axis_name="batch")
  return state.apply_gradients(grads=grads), metrics


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))


def batches(steps, batch_size=64):
  rng = np.random.default_rng(0)
  for _ in range(steps):
    x = rng.normal(size=(batch_size, 16)).astype(np.float32)
    yield {"x": x, "y": (x[:, :4].argmax(-1)).astype(np.int32)}


def main(steps=40):
  state = jax_utils.replicate(create_train_state(jax.random.key(0)))
  it = jax_utils.prefetch_to_device(
      map(common_utils.shard, batches(steps)), 2)
  for step, batch in enumerate(it):
    state, metrics = p_train_step(state, batch)
    if step % 10 == 0:
      metrics = jax.device_get(jax_utils.unreplicate(metrics))
      print(f"step {step} loss {float(metrics['loss'])!r} "
            f"accuracy {float(metrics['accuracy'])!r}")
  params = jax.device_get(jax_utils.unreplicate(state).params)
  total = sum(float(np.sum(x)) for x in jax.tree.leaves(params))
  print(f"sum of params {total!r}")


if __name__ == "__main__":
  main()
