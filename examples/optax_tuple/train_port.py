"""The port with plain `jit` and shardings: the compiler places the
collectives; the state replicated, the batch split by rows."""

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from examples.optax_tuple import train_pmap

AXIS = "batch"


def make_mesh(n_devices):
  return jax.make_mesh((n_devices,), (AXIS,),
                       axis_types=(jax.sharding.AxisType.Explicit,))


def make_step(mesh, scale=1.0):
  """`step(params, opt_state, batch)` under jit. The loss is the mean over
  the global batch: the mean of the devices' means, as pmap's pmean gives.
  `scale` != 1 is a wrong port (its learning rate off)."""
  replicated = NamedSharding(mesh, P())

  def step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(train_pmap.loss_fn)(params, batch)
    updates, opt_state = train_pmap.optimizer.update(grads, opt_state, params)
    updates = jax.tree.map(lambda u: u * scale, updates)
    return optax.apply_updates(params, updates), opt_state, loss

  return jax.jit(step, out_shardings=(replicated, replicated, replicated))


def make_wrong_step(mesh):
  return make_step(mesh, scale=jnp.float32(1.01))
