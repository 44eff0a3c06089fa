"""An equinox program pmap'd as equinox's examples write it: the model and
optax's state broadcast, the batch split (`compare.rewrite` names
`eqx.filter_pmap` and how to port it)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

optimizer = optax.sgd(0.1)


@eqx.filter_pmap(axis_name="i", in_axes=(None, None, 0, 0), out_axes=None)
def train_step(model, opt_state, x, y):
  def loss_fn(model):
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)
  loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
  grads = jax.lax.pmean(grads, "i")
  updates, opt_state = optimizer.update(grads, opt_state)
  return eqx.apply_updates(model, updates), opt_state, jax.lax.pmean(loss, "i")


if __name__ == "__main__":
  model = eqx.nn.MLP(4, 1, 16, 1, key=jax.random.key(0))
  opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
  n = jax.local_device_count()
  rng = np.random.default_rng(0)
  for step in range(3):
    x = rng.normal(size=(n, 8, 4)).astype(np.float32)
    model, opt_state, loss = train_step(model, opt_state, x, x[..., :1])
    print(step, float(loss))
