"""The equinox program ported: the same step under `eqx.filter_jit` over
`jax.shard_map`, the state replicated, the batch split."""

import functools

import equinox as eqx
import jax
from jax.sharding import PartitionSpec as P

from examples.equinox_mlp import train_pmap

AXIS = "batch"


def make_mesh(n_devices):
  return jax.make_mesh((n_devices,), (AXIS,))


# region: equinox-after
def make_step(mesh, scale=1.0):
  """`(state, batch) -> (state, loss)` on the mesh (`check_vma=False`
  keeps pmap's semantics for the body's pmean)."""
  body = functools.partial(train_pmap.step_body, scale=scale)
  return eqx.filter_jit(jax.shard_map(body, mesh=mesh,
                                      in_specs=(P(), P(AXIS)),
                                      out_specs=(P(), P()), check_vma=False))
# endregion


def make_wrong_step(mesh):
  """A wrong port: its gradients 1% large."""
  return make_step(mesh, scale=1.01)
