"""Fully sharded data parallelism (fsdp), as a classic pmap program.

Each device holds 1/N of every leaf of the train state (params and optimiser
state) along the leaf's first axis divisible by N (`shardport.strategies.fsdp`); the
others stay replicated. A step gathers the full params
(`lax.all_gather(..., tiled=True)`), differentiates the device's loss,
reduce-scatters the gradients (`lax.psum_scatter(..., tiled=True) / N`, the
mean, each device keeping its shard of it) and updates its own shards: SGD
and adam are elementwise, so the update of a shard is the shard of the
update.

Under pmap each leaf is stacked `[N, *shard]`; the shard's own shape does not
say which axis was split (a (3,) shard of a (24,) leaf looks like a
replicated (3,) leaf), so the layout is recorded, by leaf path and stacked
shape, when a state is made or restored here (`_AXES`), and read back by
`to_host` and the checkpoint layout. With many processes each holds the
rows of its own devices (pmap's host-local arrays) of a leaf split over
every process's devices; `to_host` joins the processes' rows
(`multihost_utils.process_allgather`) in pmap's process-after-process order.
"""

import functools

import jax
from jax import lax
from jax.experimental import multihost_utils
import numpy as np

from legacy_pmap import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.strategies import fsdp
from shardport.workloads import registry

VARIANTS = ("pmap",)
PROCESS_LOCAL_BATCH = True
BACKEND = devices.BACKEND
STEP_TAKES_HOST_LOCAL = devices.STEP_TAKES_HOST_LOCAL
make_placement = devices.placement

# (leaf path, stacked shape) -> the axis of the full leaf it is split along.
_AXES = {}


def _record(full_tree, stacked_tree, n):
  """Records each leaf's split axis over `n` devices (every process's)."""
  for (path, full), stacked in zip(
      jax.tree_util.tree_leaves_with_path(full_tree),
      jax.tree.leaves(stacked_tree)):
    _AXES[jax.tree_util.keystr(path), tuple(stacked.shape)] = fsdp.shard_axis(
        np.shape(full), n)


def _axis(path, stacked_shape):
  key = (jax.tree_util.keystr(path), tuple(stacked_shape))
  if key not in _AXES:
    raise ValueError(f"fsdp: no layout recorded for {key[0]} {key[1]}: the "
                     "state was not made by legacy_pmap.fsdp")
  return _AXES[key]


def _split(x, n, axis):
  """A full host leaf as `[n, *shard]`: its n pieces, or n copies."""
  x = np.asarray(x)
  if axis == fsdp.REPLICATED:
    return np.broadcast_to(x, (n, *x.shape))
  return np.stack(np.split(x, n, axis=axis))


def _join(x, axis):
  """`[n, *shard]` on the host back to the full leaf."""
  x = np.asarray(x)
  return x[0] if axis == fsdp.REPLICATED else np.concatenate(list(x), axis)


def _put(stacked, where):
  """Host `[n, ...]` rows onto pmap's devices, this process's rows only."""
  mine = devices._local(where)  # pylint: disable=protected-access
  rows = np.array([i for i, d in enumerate(where) if d in mine])
  mesh = jax.sharding.Mesh(np.array(mine), (devices.AXIS,))
  sharding = jax.sharding.NamedSharding(mesh, jax.P(devices.AXIS))
  return jax.device_put(np.ascontiguousarray(stacked[rows]), sharding)


def _place(full_tree, where):
  n = len(where)
  stacked = jax.tree.map(lambda x: _put(_split(
      x, n, fsdp.shard_axis(np.shape(x), n)), where), full_tree)
  _record(_canonical_or_tree(full_tree), _canonical_or_tree(stacked), n)
  return stacked


def _global_count(local_rows):
  """Devices over every process, from this process's rows of a leaf."""
  return local_rows * jax.process_count()


def _canonical_or_tree(tree):
  """The canonical fields of a train state, or a plain dict as it is."""
  return tree if isinstance(tree, dict) else canonical.fields(tree)


def create_state(seed, config, placement):
  """The initial train state, each device its shard of every split leaf."""
  return _place(jax.device_get(registry.init_state(seed, config)), placement)


def put_batch(batch, placement):
  """A global host batch reshaped to `[n_devices, local_batch, ...]`."""
  return devices.shard_batch(batch, placement)


def _state_axes(config, n):
  return fsdp.shard_axes(jax.eval_shape(
      lambda: registry.init_state(config.seed, config)), n)


# region: fsdp-train-step
def make_train_step(config, placement, variant="pmap"):
  """The compiled step `(state, batch) -> (state, {"loss"})`."""
  assert variant in VARIANTS, variant
  workload = registry.get(config.workload)
  n = len(placement)
  axes = _state_axes(config, n).params

  def train_step(axes, state, batch):
    params = fsdp.gather(state.params, axes, devices.AXIS)
    loss, grads = jax.value_and_grad(workload.loss)(params, batch, 1)
    grads = fsdp.scatter_mean(grads, axes, devices.AXIS, n)
    loss = lax.pmean(loss, axis_name=devices.AXIS)
    return state.apply_gradients(grads=grads), {"loss": loss}

  return jax.pmap(functools.partial(train_step, axes), axis_name=devices.AXIS, devices=placement,
                  donate_argnums=0)
# endregion


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> {"loss_sum", "correct", "count"}`."""
  workload = registry.get(config.workload)
  axes = _state_axes(config, len(placement)).params

  def evaluate(axes, state, batch):
    params = fsdp.gather(state.params, axes, devices.AXIS)
    return lax.psum(workload.metric_sums(params, batch),
                    axis_name=devices.AXIS)

  return jax.pmap(functools.partial(evaluate, axes), axis_name=devices.AXIS, devices=placement)


def _unsharded(tree):
  """Host copy of a stacked tree, every leaf whole (its shards joined)."""
  host = jax.device_get(tree)
  axes = jax.tree_util.tree_map_with_path(
      lambda p, x: _axis(p, np.shape(x)), host)
  if jax.process_count() > 1:  # every process's rows, in pmap's order
    host = multihost_utils.process_allgather(host, tiled=True)
  return jax.tree.map(_join, host, axes)


def to_host(state):
  """The whole train state as numpy, full leaves, no device axis: the same
  canonical layout as data_parallel's (`shardport.workloads.canonical.fields`)."""
  return _unsharded(canonical.fields(state))


def metrics_to_host(metrics):
  return devices.fetch(metrics)


class Checkpoints:
  """The checkpoint holds every leaf whole (as data_parallel's does), so a
  data_parallel checkpoint restores as fsdp and back. Restored onto one
  device, then split onto pmap's devices as `like` holds them."""

  @staticmethod
  def to_checkpoint(tree):
    return _unsharded(tree)

  @staticmethod
  def checkpoint_target(tree):
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def target(path, x):
      n, shard = _global_count(x.shape[0]), list(x.shape[1:])
      axis = _axis(path, x.shape)
      if axis != fsdp.REPLICATED:
        shard[axis] *= n
      return jax.ShapeDtypeStruct(tuple(shard), x.dtype, sharding=device)
    return jax.tree_util.tree_map_with_path(target, tree)

  @staticmethod
  def from_checkpoint(tree, like):
    n = _global_count(jax.tree.leaves(like)[0].shape[0])

    def place(x, l):
      local = l.shape[0]
      pieces = _split(jax.device_get(x), n, fsdp.shard_axis(np.shape(x), n))
      mine = pieces[jax.process_index() * local:][:local]
      sharding = jax.sharding.NamedSharding(l.sharding.mesh, jax.P(
          devices.AXIS))
      return jax.device_put(np.ascontiguousarray(mine), sharding)
    placed = jax.tree.map(place, tree, like)
    _record(jax.device_get(tree), placed, n)
    return placed


CHECKPOINTS = Checkpoints
from_host = checkpoints.from_host_of(__name__)
