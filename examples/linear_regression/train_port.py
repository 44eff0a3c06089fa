"""The tutorial's program ported: the same `update_body` under
`jax.jit(jax.shard_map(...))`, params replicated, the batch split."""

import jax
from jax.sharding import PartitionSpec as P

from examples.linear_regression import train_pmap

AXIS = "num_devices"


def make_mesh(n_devices):
  return jax.make_mesh((n_devices,), (AXIS,),
                       axis_types=(jax.sharding.AxisType.Explicit,))


def make_update(mesh, body=train_pmap.update_body):
  """`update(params, xs, ys)` on the mesh. `check_vma=False` keeps pmap's
  semantics, so the body's pmean of the gradients is right as it is."""
  return jax.jit(jax.shard_map(
      body, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)),
      out_specs=(P(), P()), check_vma=False))


def _sum_of_gradients(params, xs, ys, axis_name=AXIS):
  """A wrong port: psum where the program pmeans (N x the gradients)."""
  loss, grads = jax.value_and_grad(train_pmap.loss_fn)(params, xs, ys)
  grads = jax.lax.psum(grads, axis_name=axis_name)
  loss = jax.lax.pmean(loss, axis_name=axis_name)
  return jax.tree.map(lambda p, g: p - g * train_pmap.LEARNING_RATE,
                      params, grads), loss


def make_wrong_update(mesh):
  return make_update(mesh, _sum_of_gradients)
