"""A pmap program whose input pipeline batches per device, then by devices.

An input of `python -m compare.rewrite --global` in
tests/test_rewrite_pipelines.py, written as tf.data pipelines feed pmap
(`ds.batch(per_device).batch(jax.local_device_count())`), in numpy:
`batch` is tf.data's `.batch(size, drop_remainder=True)`, so each step's
batch arrives stacked [devices, per_device, ...] from the pipeline itself
(tensorflow is not installed here: the same chain, run without it).
The pmap'd step averages gradients and loss over the devices. Prints the
loss every step and the sum of the parameters.
"""

from flax import jax_utils
import jax
import jax.numpy as jnp
import numpy as np
import optax

PER_DEVICE = 16
tx = optax.adam(3e-2)


def examples(seed):
  """The dataset, one example at a time (tf.data's from_tensor_slices)."""
  rng = np.random.default_rng(seed)
  while True:
    x = rng.normal(size=(8,)).astype(np.float32)
    yield {"x": x, "y": np.float32(np.sin(x[:4]).sum() - x[4:].prod())}


def batch(elements, size):
  """`size` consecutive elements stacked (tf.data's `.batch`)."""
  group = []
  for element in elements:
    group.append(element)
    if len(group) == size:
      yield jax.tree.map(lambda *xs: np.stack(xs), *group)
      group = []


def input_pipeline(seed):
  ds = batch(examples(seed), PER_DEVICE)
  return batch(ds, jax.local_device_count())


def init(rng):
  k1, k2 = jax.random.split(rng)
  return {"hidden": jax.random.normal(k1, (8, 32)) / np.sqrt(8),
          "out": jax.random.normal(k2, (32,)) / np.sqrt(32)}


def train_step(params, opt_state, batch):
  def loss_fn(p):
    pred = jnp.tanh(batch["x"] @ p["hidden"]) @ p["out"]
    return jnp.mean((pred - batch["y"]) ** 2)

  loss, grads = jax.value_and_grad(loss_fn)(params)
  grads = jax.lax.pmean(grads, "devices")
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, jax.lax.pmean(
      loss, "devices")


p_train_step = jax.pmap(train_step, axis_name="devices")


def main(steps=5):
  params = init(jax.random.key(1))
  opt_state = tx.init(params)
  params, opt_state = jax_utils.replicate((params, opt_state))
  for step, batch in zip(range(steps), input_pipeline(0)):
    params, opt_state, loss = p_train_step(params, opt_state, batch)
    print(f"step {step} loss {float(loss[0])!r}")
  params = jax.device_get(jax_utils.unreplicate(params))
  print("sum", repr(float(sum(np.sum(x) for x in jax.tree.leaves(params)))))


if __name__ == "__main__":
  main()
