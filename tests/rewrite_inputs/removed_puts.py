"""A pmap program from before jax 0.10, as teams wrote them (brax 0.14.2's
agents, chex's and flax's own helpers until 2026): the state placed with
`jax.device_put_replicated`, each batch with `jax.device_put_sharded`.

jax 0.10 removed both; the rewrite's first step replaces them
(tests/test_rewrite_removed_puts.py).
"""

import jax
import jax.numpy as jnp
import numpy as np

DEVICES = jax.local_devices()
TRUE_W = np.array([[1.0], [2.0], [3.0]], np.float32)


def loss(params, x, y):
  return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def update(params, x, batch):
  value, grads = jax.value_and_grad(loss)(params, x, batch["y"])
  grads = jax.lax.pmean(grads, axis_name="devices")
  params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
  return params, jax.lax.pmean(value, axis_name="devices")


p_update = jax.pmap(update, axis_name="devices")


def main():
  params = jax.device_put_replicated(
      {"w": np.ones((3, 1), np.float32), "b": np.zeros((1,), np.float32)},
      DEVICES)
  rng = np.random.default_rng(0)
  for step in range(3):
    x = rng.normal(size=(len(DEVICES) * 4, 3)).astype(np.float32)
    rows = x.reshape(len(DEVICES), 4, 3)
    xs = jax.device_put_sharded(list(rows), DEVICES)
    batch = jax.device_put_sharded([{"y": r @ TRUE_W} for r in rows], DEVICES)
    params, value = p_update(params, xs, batch)
    print(step, float(value[0]), params["w"].shape)
  print(np.asarray(params["w"][0]).ravel().tolist(),
        float(params["b"][0][0]))


if __name__ == "__main__":
  main()
