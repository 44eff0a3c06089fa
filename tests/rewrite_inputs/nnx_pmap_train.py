"""A flax NNX program pmap'd as flax NNX's own docs write it: a model and an
`nnx.Optimizer` broadcast to every device, the batch split, the gradients
averaged (`compare.rewrite` names `nnx.pmap` and how to port it)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx


class MLP(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(4, 16, rngs=rngs)
    self.out = nnx.Linear(16, 1, rngs=rngs)

  def __call__(self, x):
    return self.out(jax.nn.relu(self.hidden(x)))


@nnx.pmap(axis_name="batch", in_axes=(None, None, 0, 0), out_axes=None)
def train_step(model, optimizer, x, y):
  def loss_fn(model):
    return jnp.mean((model(x) - y) ** 2)
  loss, grads = nnx.value_and_grad(loss_fn)(model)
  grads = jax.lax.pmean(grads, "batch")
  optimizer.update(model, grads)
  return jax.lax.pmean(loss, "batch")


if __name__ == "__main__":
  model = MLP(nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
  n = jax.local_device_count()
  rng = np.random.default_rng(0)
  for step in range(3):
    x = rng.normal(size=(n, 8, 4)).astype(np.float32)
    print(step, float(train_step(model, optimizer, x, x.sum(-1, keepdims=True))))
