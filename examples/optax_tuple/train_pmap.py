"""The team's program: a softmax regression trained with optax's adam,
`step(params, opt_state, batch) -> (params, opt_state, loss)`, pmap'd with
the state broadcast to every device (`in_axes=None, out_axes=None`), as
flax's examples pmap today."""

import jax
import numpy as np
import optax

FEATURES, CLASSES = 16, 4
optimizer = optax.adam(1e-2)


def init(seed=0):
  """`(params, opt_state)`: the state as the program holds it."""
  rng = np.random.default_rng(seed)
  params = {"w": (0.1 * rng.normal(size=(FEATURES, CLASSES))).astype(
      np.float32), "b": np.zeros(CLASSES, np.float32)}
  return params, optimizer.init(params)


def loss_fn(params, batch):
  logits = batch["x"] @ params["w"] + params["b"]
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, batch["y"]).mean()


def step_body(params, opt_state, batch, axis_name="batch"):
  loss, grads = jax.value_and_grad(loss_fn)(params, batch)
  grads = jax.lax.pmean(grads, axis_name)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return (optax.apply_updates(params, updates), opt_state,
          jax.lax.pmean(loss, axis_name))


p_step = jax.pmap(step_body, axis_name="batch", in_axes=(None, None, 0),
                  out_axes=(None, None, 0))


def data(rows, seed=1):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
  w = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
  return x, np.argmax(x @ w, axis=-1).astype(np.int32)
