"""The team's equinox program: an `eqx.nn.MLP` trained with optax, its
arrays split from its static parts (`eqx.partition`), the step
`eqx.filter_pmap`'d with the state broadcast (`in_axes=(None, 0)`)."""

import equinox as eqx
import jax
import numpy as np
import optax

FEATURES, CLASSES = 16, 4
optimizer = optax.adam(1e-2)


def split(seed=0):
  """`(static, (params, opt_state))`: the arrays are the state."""
  model = eqx.nn.MLP(FEATURES, CLASSES, width_size=32, depth=1,
                     key=jax.random.key(seed))
  params, static = eqx.partition(model, eqx.is_array)
  return static, (params, optimizer.init(params))


STATIC, _ = split()


def step_body(state, batch, axis_name="batch", scale=1.0):
  """One step; the gradients averaged over `axis_name` (`scale` != 1: a
  wrong port's gradients)."""
  params, opt_state = state

  def loss_fn(params):
    model = eqx.combine(params, STATIC)
    logits = jax.vmap(model)(batch["x"])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()

  loss, grads = jax.value_and_grad(loss_fn)(params)
  grads = jax.tree.map(lambda g: g * scale, jax.lax.pmean(grads, axis_name))
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return ((eqx.apply_updates(params, updates), opt_state),
          jax.lax.pmean(loss, axis_name))


# region: equinox-before
p_step = eqx.filter_pmap(step_body, axis_name="batch", in_axes=(None, 0),
                         out_axes=(None, 0))
# endregion


def data(rows, seed=1):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
  w = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
  return x, np.argmax(x @ w, axis=-1).astype(np.int32)
