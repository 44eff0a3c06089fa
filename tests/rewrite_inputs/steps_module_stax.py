"""A team's steps module in `jax.example_libraries.optimizers`' style:
`update(i, opt_state, batch)`, pmapped here and called by a loop in another
file. The loss is reported per device."""

import jax
import jax.numpy as jnp
from jax.example_libraries import optimizers

opt_init, opt_update, get_params = optimizers.sgd(0.05)


def loss_fn(params, batch):
  pred = batch["x"] @ params["w"] + params["b"]
  return jnp.mean((pred - batch["y"]) ** 2)


def update(i, opt_state, batch):
  params = get_params(opt_state)
  loss, grads = jax.value_and_grad(loss_fn)(params, batch)
  grads = jax.lax.pmean(grads, axis_name="batch")
  return opt_update(i, grads, opt_state), loss


p_update = jax.pmap(update, axis_name="batch", in_axes=(None, 0, 0))
