"""The NNX program ported: the same step under
`nnx.jit(nnx.shard_map(...))`, the state replicated, the batch split."""

import functools

from flax import nnx
import jax
from jax.sharding import PartitionSpec as P

from examples.nnx_mlp import train_pmap

AXIS = "batch"


def make_mesh(n_devices):
  return jax.make_mesh((n_devices,), (AXIS,))


def make_step(mesh, scale=1.0):
  """`(state, batch) -> (state, loss)` on the mesh; `check_vma=False`
  keeps pmap's semantics for the body's pmean of the gradients."""
  body = functools.partial(train_pmap.step_body, scale=scale)
  return nnx.jit(nnx.shard_map(body, mesh=mesh, in_specs=(P(), P(AXIS)),
                               out_specs=(P(), P()), check_vma=False))


def make_wrong_step(mesh):
  """A wrong port: its gradients 1% large."""
  return make_step(mesh, scale=1.01)
