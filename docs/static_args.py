"""Static arguments and closed-over arrays, before and after.

- Before (region `static-before`): a pmap'd step with a Python flag through
  `static_broadcasted_argnums` and a table of class weights it closes over.
- After (region `static-after`): jit's `static_argnums` around the
  shard_map (the flag bound into the body), and the table passed as an
  argument placed with `P()`: a body may close over a host array, but an
  array sharded on an Explicit mesh is refused
  ([the message](MIGRATION.md#err-closure-explicit)), and an argument is
  what the next reader expects to see placed.

`tests/test_more_idioms.py` runs both on 8 devices, each flag value, and
checks the numbers agree and that each flag value compiles once.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

# region: static-helper
CLASS_WEIGHTS = np.array([1.0, 2.0, 0.5], np.float32)


def weighted_loss(w, x, y, weights, squared):
  err = (x @ w - y) * jnp.asarray(weights)[jnp.argmax(x, -1) % 3][:, None]
  return jnp.mean(err ** 2) if squared else jnp.mean(jnp.abs(err))
# endregion


# region: static-before
@functools.partial(jax.pmap, axis_name="batch",
                   static_broadcasted_argnums=(2,))
def loss_pmap(w, batch, squared):  # `squared`: a Python bool
  x, y = batch
  loss = weighted_loss(w, x, y, CLASS_WEIGHTS, squared)  # closed over
  return jax.lax.pmean(loss, "batch")
# endregion


# region: static-after
def make_loss(mesh):
  """Built once; `squared` is static (one compile per value), the weights
  an argument placed with P()."""

  @functools.partial(jax.jit, static_argnums=(3,))
  def loss(w, batch, weights, squared):
    def body(w, batch, weights):
      x, y = batch
      return jax.lax.pmean(weighted_loss(w, x, y, weights, squared), "batch")
    return jax.shard_map(body, mesh=mesh, in_specs=(P(), P("batch"), P()),
                         out_specs=P())(w, batch, weights)

  return loss
# endregion


def both(squared: bool, rows: int = 64, seed: int = 0):
  """`(pmap's loss, the port's loss, the port, its arguments)` on every
  device."""
  n = jax.device_count()
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(3, 1)).astype(np.float32)
  x = rng.normal(size=(rows, 3)).astype(np.float32)
  y = rng.normal(size=(rows, 1)).astype(np.float32)
  before = loss_pmap(np.broadcast_to(w, (n, *w.shape)),
                     (x.reshape(n, -1, 3), y.reshape(n, -1, 1)), squared)
  mesh = jax.make_mesh((n,), ("batch",))
  loss = make_loss(mesh)
  args = (jax.device_put(w, NamedSharding(mesh, P())),
          jax.device_put((x, y), NamedSharding(mesh, P("batch"))),
          jax.device_put(CLASS_WEIGHTS, NamedSharding(mesh, P())), squared)
  return float(before[0]), float(loss(*args)), loss, args
