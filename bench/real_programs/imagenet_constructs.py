"""A stand-in with the pmap constructs of flax's examples/imagenet/train.py.

Written as that file writes them, on a tiny network and synthetic images:
the state broadcast and returned whole (`in_axes=(None, 0)`,
`out_axes=(None, 0)`), BatchNorm statistics averaged over the `batch` axis,
an eval step `in_axes=(None, 0)`. Prints every number it computes.
"""

import functools
from typing import Any

from flax import linen as nn
from flax.training import common_utils
from flax.training import train_state
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import optax


class ResNetStandIn(nn.Module):
  """A convolution, BatchNorm over the devices' batch, and a classifier."""

  @nn.compact
  def __call__(self, x, train=True):
    x = nn.Conv(8, (3, 3))(x)
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                     axis_name="batch")(x)
    x = nn.relu(x).mean(axis=(1, 2))
    return nn.Dense(10)(x)


class TrainState(train_state.TrainState):
  batch_stats: Any


def compute_metrics(logits, labels):
  loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits,
                                                                  labels))
  metrics = {"loss": loss,
             "accuracy": jnp.mean(jnp.argmax(logits, -1) == labels)}
  return lax.pmean(metrics, axis_name="batch")


def train_step(state, batch, learning_rate_fn):
  """Perform a single training step."""

  def loss_fn(params):
    logits, new_model_state = state.apply_fn(
        {"params": params, "batch_stats": state.batch_stats},
        batch["image"], mutable=["batch_stats"])
    loss = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["label"]))
    return loss, (new_model_state, logits)

  step = state.step
  lr = learning_rate_fn(step)
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  aux, grads = grad_fn(state.params)
  # Re-use same axis_name as in the call to `pmap(...train_step...)` below.
  grads = lax.pmean(grads, axis_name="batch")
  new_model_state, logits = aux[1]
  metrics = compute_metrics(logits, batch["label"])
  metrics["learning_rate"] = lr
  new_state = state.apply_gradients(
      grads=grads, batch_stats=new_model_state["batch_stats"])
  return new_state, metrics


def eval_step(state, batch):
  variables = {"params": state.params, "batch_stats": state.batch_stats}
  logits = state.apply_fn(variables, batch["image"], train=False,
                          mutable=False)
  return compute_metrics(logits, batch["label"])


def main():
  rng = np.random.default_rng(0)
  images = rng.normal(size=(6, 64, 8, 8, 3)).astype(np.float32)
  labels = rng.integers(0, 10, (6, 64))
  model = ResNetStandIn()
  variables = model.init(jax.random.key(0), images[0][:1], train=False)
  learning_rate_fn = optax.cosine_decay_schedule(0.1, 20)
  state = TrainState.create(
      apply_fn=model.apply, params=variables["params"],
      tx=optax.sgd(learning_rate_fn, momentum=0.9, nesterov=True),
      batch_stats=variables["batch_stats"])
  p_train_step = jax.pmap(
      functools.partial(train_step, learning_rate_fn=learning_rate_fn),
      in_axes=(None, 0),
      out_axes=(None, 0),
      axis_name="batch",
  )
  p_eval_step = jax.pmap(eval_step, in_axes=(None, 0), axis_name="batch")
  for step in range(6):
    batch = common_utils.shard({"image": images[step],
                                "label": labels[step]})
    state, metrics = p_train_step(state, batch)
    metrics = jax.tree.map(lambda x: repr(float(x[0])), metrics)
    print("train", step, sorted(metrics.items()))
  eval_batch = common_utils.shard({"image": images[0], "label": labels[0]})
  metrics = p_eval_step(state, eval_batch)
  print("eval", sorted(jax.tree.map(lambda x: repr(float(x[0])),
                                    metrics).items()))
  print("batch_stats mean", [repr(float(v)) for v in np.asarray(
      state.batch_stats["BatchNorm_0"]["mean"])])


if __name__ == "__main__":
  main()
