"""Every way a team calls a pmapped function, in one script.

An input of `python -m compare.rewrite` in tests/test_rewrite_calls.py: run
as a script, it prints every number it computes; the rewrite must print the
same. Keyword arguments (flax's `p_train_step(state, batch,
dropout_rng=rngs)`), `*args` and `**kwargs`, a pmap kept in a dict and on an
object, a pmapped method, static arguments beside keywords, donation.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np


def train_step(params, batch, dropout_rng=None, scale=1.0):
  keep = jax.random.bernoulli(dropout_rng, 0.9, batch["x"].shape)
  x = jnp.where(keep, batch["x"], 0.0) * scale

  def loss_fn(w):
    return jnp.mean((x @ w - batch["y"]) ** 2)

  loss, grad = jax.value_and_grad(loss_fn)(params)
  grad = jax.lax.pmean(grad, axis_name="batch")
  return params - 0.1 * grad, jax.lax.pmean(loss, axis_name="batch")


def eval_step(params, batch):
  return jax.lax.psum(jnp.sum((batch["x"] @ params - batch["y"]) ** 2),
                      "batch")


class Trainer:

  def __init__(self, params):
    self.params = params

  @functools.partial(jax.pmap, axis_name="batch",
                     static_broadcasted_argnums=(0,))
  def scaled_loss(self, batch):
    return jax.lax.pmean(jnp.mean(batch["x"]) * 2.0, "batch")


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))
steps = {"eval": jax.pmap(eval_step, axis_name="batch")}


class Holder:
  pass


holder = Holder()
holder.step = jax.pmap(functools.partial(train_step, scale=0.5),
                       axis_name="batch")


@functools.partial(jax.pmap, axis_name="batch",
                   static_broadcasted_argnums=(2,))
def shifted(params, batch, shift, dropout_rng=None):
  del dropout_rng
  return jax.lax.pmean(jnp.sum(batch["x"] @ params) + shift, "batch")


def main():
  n = jax.local_device_count()
  rng = np.random.default_rng(0)
  params = np.stack([rng.normal(size=(4,)).astype(np.float32)] * n)
  batch = {"x": rng.normal(size=(n, 8, 4)).astype(np.float32),
           "y": rng.normal(size=(n, 8)).astype(np.float32)}
  rngs = jax.random.split(jax.random.PRNGKey(0), n)
  params = jnp.asarray(params)
  for i in range(3):
    params, loss = p_train_step(params, batch, dropout_rng=rngs)
    print("keyword", i, repr(float(loss[0])))
  args = (params, batch)
  kwargs = {"dropout_rng": rngs}
  params, loss = p_train_step(*args, **kwargs)
  print("unpacked", repr(float(loss[0])))
  print("dict", repr(float(steps["eval"](params, batch)[0])))
  _, loss = holder.step(params, batch, dropout_rng=rngs)
  print("attribute", repr(float(loss[0])))
  print("method", repr(float(Trainer(params).scaled_loss(batch)[0])))
  print("static", repr(float(shifted(params, batch, 3, dropout_rng=rngs)[0])))
  print("params", [repr(float(v)) for v in np.asarray(params[0])])


if __name__ == "__main__":
  main()
