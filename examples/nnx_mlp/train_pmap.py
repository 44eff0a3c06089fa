"""The team's NNX program: an MLP and its optimiser split into one
`nnx.State`; the step merges them, updates, and splits again, `nnx.pmap`'d
with the state broadcast (`in_axes=(None, 0), out_axes=(None, 0)`)."""

import jax
import numpy as np
import optax
from flax import nnx

FEATURES, HIDDEN, CLASSES = 16, 32, 4


class MLP(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(FEATURES, HIDDEN, rngs=rngs)
    self.out = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

  def __call__(self, x):
    return self.out(jax.nn.relu(self.hidden(x)))


def split(seed=0):
  """`(graphdef, state)` of the model and its optimiser."""
  model = MLP(nnx.Rngs(seed))
  optimizer = nnx.Optimizer(model, optax.sgd(0.1, momentum=0.9),
                            wrt=nnx.Param)
  return nnx.split((model, optimizer))


GRAPHDEF, _ = split()


def step_body(state, batch, axis_name="batch", scale=1.0):
  """One step on the split state; the gradients averaged over `axis_name`
  (`scale` != 1: a wrong port's gradients)."""
  model, optimizer = nnx.merge(GRAPHDEF, state)

  def loss_fn(model):
    return optax.softmax_cross_entropy_with_integer_labels(
        model(batch["x"]), batch["y"]).mean()

  loss, grads = nnx.value_and_grad(loss_fn)(model)
  grads = jax.tree.map(lambda g: g * scale, jax.lax.pmean(grads, axis_name))
  optimizer.update(model, grads)
  return nnx.split((model, optimizer))[1], jax.lax.pmean(loss, axis_name)


p_step = nnx.pmap(step_body, axis_name="batch", in_axes=(None, 0),
                  out_axes=(None, 0))


def data(rows, seed=1):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
  w = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
  return x, np.argmax(x @ w, axis=-1).astype(np.int32)
