"""A training script whose pmap is built inside `main`, as flax's
examples/nlp_seq builds its `p_train_step`: an input of
`python -m compare.rewrite --prove` (tests/test_rewrite_local_pmap.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np


def train_step(params, batch, learning_rate, dropout_rng=None):
  keep = jax.random.bernoulli(jax.random.fold_in(dropout_rng, 0), 0.9,
                              batch["x"].shape)

  def loss_fn(w):
    pred = jnp.where(keep, batch["x"], 0.0) @ w["w"] + w["b"]
    return jnp.mean((pred - batch["y"]) ** 2)

  loss, grads = jax.value_and_grad(loss_fn)(params)
  grads = jax.lax.pmean(grads, axis_name="batch")
  params = jax.tree.map(lambda p, g: p - learning_rate * g, params, grads)
  return params, {"loss": jax.lax.pmean(loss, axis_name="batch")}


def main():
  n = jax.local_device_count()
  p_train_step = jax.pmap(
      functools.partial(train_step, learning_rate=0.1),
      axis_name="batch",
      donate_argnums=(0,),
  )
  params = jax.tree.map(lambda x: np.stack([x] * n),
                        {"w": np.zeros(3, np.float32), "b": np.float32(0)})
  rng = np.random.default_rng(0)
  keys = jax.random.split(jax.random.key(0), n)
  for step in range(5):
    x = rng.normal(size=(n, 8, 3)).astype(np.float32)
    batch = {"x": x, "y": x @ np.float32([1, -2, 3])}
    params, metrics = p_train_step(params, batch, dropout_rng=keys)
    print(step, repr(float(metrics["loss"][0])))


if __name__ == "__main__":
  main()
