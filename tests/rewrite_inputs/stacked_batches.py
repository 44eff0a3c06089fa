"""A pmap program whose own pipeline stacks each batch [devices, 16, 8].

An input of `python -m compare.rewrite --global` in
tests/test_rewrite_pipelines.py (issue 74's program): a generator reshapes
numpy rows to [jax.local_device_count(), 16, 8], no `shard`; the state is
`replicate`d, the pmap'd step donates it and averages gradients and loss
(pmean), `unreplicate` reads the loss. Prints the loss each step and the
sums of the parameters.
"""

import functools

from flax import jax_utils
import jax
import jax.numpy as jnp
import numpy as np
import optax

PER_DEVICE = 16
tx = optax.sgd(0.1, momentum=0.9)


def init(rng):
  w_key, b_key = jax.random.split(rng)
  return {"w": jax.random.normal(w_key, (8, 4)) * 0.1,
          "b": jax.random.normal(b_key, (4,)) * 0.1}


def batches(steps):
  """Rows of numpy data stacked per device: [devices, 16, 8]."""
  rng = np.random.default_rng(0)
  devices = jax.local_device_count()
  for _ in range(steps):
    x = rng.normal(size=(devices * PER_DEVICE, 8)).astype(np.float32)
    y = (x[:, :4] * 2.0 - x[:, 4:]).astype(np.float32)
    yield (x.reshape(devices, PER_DEVICE, 8), y.reshape(devices, PER_DEVICE, 4))


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
  def loss_fn(p):
    pred = jnp.tanh(x @ p["w"] + p["b"])
    return jnp.mean((pred - y) ** 2)

  loss, grads = jax.value_and_grad(loss_fn)(params)
  grads = jax.lax.pmean(grads, axis_name="batch")
  loss = jax.lax.pmean(loss, axis_name="batch")
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss


def main():
  params = init(jax.random.key(0))
  opt_state = jax_utils.replicate(tx.init(params))
  params = jax_utils.replicate(params)
  for step, (x, y) in enumerate(batches(5)):
    params, opt_state, loss = train_step(params, opt_state, x, y)
    print(f"step {step} loss {float(jax_utils.unreplicate(loss))!r}")
  params = jax.device_get(jax_utils.unreplicate(params))
  print("w", repr(float(np.sum(params["w"]))),
        "b", repr(float(np.sum(params["b"]))))


if __name__ == "__main__":
  main()
