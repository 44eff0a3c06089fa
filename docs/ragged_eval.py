"""The last, ragged eval batch: rows that do not divide over the devices.

- Before: flax's `pad_shard_unpad` around a pmap'd `predict` pads the rows to
  a multiple of the devices, stacks them per device and cuts the padding off
  the result (region `ragged-before`).
- After: pad the rows yourself, place them with `P('data')` on the mesh, and
  cut the padding off on the host (region `ragged-after`).

`tests/test_traps.py` runs both on 8 devices against one device's
predictions; `docs/MORE-IDIOMS.md` shows the regions.
"""

import functools

import flax.jax_utils
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


# region: ragged-helper
def predict_one(params, x):
  """A linear model's logits for the rows of `x`."""
  return x @ params["w"] + params["b"]
# endregion


# region: ragged-before
@flax.jax_utils.pad_shard_unpad  # pads, stacks per device, unpads
@functools.partial(jax.pmap, axis_name="batch")
def predict_pmap(params, x):  # params: replicated per device
  return predict_one(params, x)
# endregion


# region: ragged-after
@functools.cache  # built once per mesh: a new jit here each call compiles
def predict_on(mesh):  # again on every call (the guide's "build once")
  return jax.jit(jax.shard_map(predict_one, mesh=mesh,
                               in_specs=(P(), P("data")),
                               out_specs=P("data")))


def predict_on_mesh(params, x, mesh):
  """Logits for any number of rows: padded to a multiple of the mesh's size
  with zero rows, split over `data`, the padding cut off on the host. One
  process, or the same `x` on every host (`jax.device_put` asserts that);
  a host's own rows: docs/MIGRATION.md#many-processes."""
  rows, size = len(x), mesh.shape["data"]
  padded = np.concatenate([x, np.zeros((-rows % size, *x.shape[1:]),
                                       x.dtype)])
  logits = predict_on(mesh)(
      jax.device_put(params, NamedSharding(mesh, P())),
      jax.device_put(padded, NamedSharding(mesh, P("data"))))
  return np.asarray(logits)[:rows]  # a host slice: no sharded indexing
# endregion


def ragged_predictions(rows=37, features=5, classes=3, seed=0):
  """`(before, after, one device)` logits for `rows` rows on all devices."""
  rng = np.random.default_rng(seed)
  params = {"w": rng.normal(size=(features, classes)).astype(np.float32),
            "b": rng.normal(size=classes).astype(np.float32)}
  x = rng.normal(size=(rows, features)).astype(np.float32)
  mesh = jax.make_mesh((jax.device_count(),), ("data",))
  before = predict_pmap(flax.jax_utils.replicate(params), x)
  after = predict_on_mesh(params, x, mesh)
  return np.asarray(before), after, np.asarray(predict_one(
      jax.tree.map(jnp.asarray, params), x))
