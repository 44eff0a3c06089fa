"""Fully sharded data parallelism (fsdp) on a mesh: the shard_map and jit
ports.

Every leaf of the train state is split over the mesh's `data` axis along its
first axis divisible by N (`P(None, ..., 'data')`, `shardport.strategies.fsdp`); the
others stay replicated (`P()`). The global batch is split over `data` as for
data_parallel. `shard_map` keeps the classic program's explicit collectives
(all-gather of the params, reduce-scatter of the gradients); `jit` takes
the same shardings on its state (`NamedSharding`) and lets the compiler
place the collectives.
"""

import functools

import jax
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
import numpy as np
from jax.sharding import PartitionSpec as P

from sharded import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.strategies import fsdp
from shardport.workloads import registry

# "jit_unconstrained": the jit port before its fix (no constraint on the
# params or the gradient), kept to measure against (bench/jit_ports.py); no
# strategy runs it.
VARIANTS = ("shard_map", "jit", "jit_unconstrained")
PROCESS_LOCAL_BATCH = True
BACKEND = devices.BACKEND
STEP_TAKES_HOST_LOCAL = devices.STEP_TAKES_HOST_LOCAL
make_placement = devices.placement


# region: fsdp-specs
def _spec(axis):
  if axis == fsdp.REPLICATED:
    return P()
  return P(*([None] * axis), devices.AXIS)


def _state_specs(state, n):
  """The PartitionSpec of every leaf of `state` (global shapes), in its
  tree; built from the state itself, whose static fields the specs share."""
  return jax.tree.map(lambda x: _spec(fsdp.shard_axis(np.shape(x), n)), state)
# endregion


def create_state(seed, config, placement):
  """The initial train state, each device holding its shards."""
  host = jax.device_get(registry.init_state(seed, config))
  n = placement.shape[devices.AXIS]
  return jax.tree.map(lambda x: devices._global(  # pylint: disable=protected-access
      x, NamedSharding(placement, _spec(fsdp.shard_axis(np.shape(x), n)))), host)


def put_batch(batch, placement):
  """A global host batch split over the mesh's `data` axis."""
  return devices.shard_batch(batch, placement)


# region: fsdp-train-step
def make_train_step(config, placement, variant="shard_map"):
  """The compiled step `(state, batch) -> (state, {"loss"})`."""
  assert variant in VARIANTS, variant
  workload = registry.get(config.workload)
  n = placement.shape[devices.AXIS]

  def train_step(axes, state, batch):
    params = fsdp.gather(state.params, axes, devices.AXIS)
    loss, grads = jax.value_and_grad(workload.loss)(params, batch, 1)
    grads = fsdp.scatter_mean(grads, axes, devices.AXIS, n)
    loss = lax.pmean(loss, axis_name=devices.AXIS)
    return state.apply_gradients(grads=grads), {"loss": loss}

  def global_train_step(state, batch):
    # data_parallel's global step; the state's shardings make it fsdp. The
    # params are gathered once, before the forward pass, and the gradient
    # comes back in their sharding: unconstrained, XLA gathers them again
    # for the backward pass and all-to-alls activations
    # (docs/jax-facts.md).
    params = state.params
    if variant == "jit":
      specs = _state_specs(params, n)
      params = lax.with_sharding_constraint(
          params, jax.tree.map(lambda _: NamedSharding(placement, P()),
                               params))
    loss, grads = jax.value_and_grad(workload.loss)(params, batch, n)
    if variant == "jit":
      grads = lax.with_sharding_constraint(grads, jax.tree.map(
          lambda s: NamedSharding(placement, s), specs))
    state = state.apply_gradients(grads=grads)
    return lax.with_sharding_constraint(state, jax.tree.map(
        lambda s: NamedSharding(placement, s), _state_specs(state, n))), {
            "loss": lax.with_sharding_constraint(
                loss, NamedSharding(placement, P()))}

  def sharded_step(state, batch):
    # The specs and split axes are read off the state (global shapes) when
    # traced. check_vma=False: `grad` gives each device's own gradient of
    # the gathered params, as under pmap; psum_scatter / N makes it the
    # mean's shard.
    specs = _state_specs(state, n)
    axes = fsdp.shard_axes(state.params, n)
    return jax.shard_map(functools.partial(train_step, axes), mesh=placement,
                         in_specs=(specs, P(devices.AXIS)),
                         out_specs=(specs, P()), check_vma=False)(state, batch)

  return jax.jit(sharded_step if variant == "shard_map" else global_train_step,
                 donate_argnums=0)
# endregion


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> {"loss_sum", "correct", "count"}`."""
  workload = registry.get(config.workload)
  n = placement.shape[devices.AXIS]

  def evaluate(axes, state, batch):
    params = fsdp.gather(state.params, axes, devices.AXIS)
    return lax.psum(workload.metric_sums(params, batch),
                    axis_name=devices.AXIS)

  def sharded_evaluate(state, batch):
    return jax.shard_map(
        functools.partial(evaluate, fsdp.shard_axes(state.params, n)),
        mesh=placement, in_specs=(_state_specs(state, n), P(devices.AXIS)),
        out_specs=P(), check_vma=False)(state, batch)

  return jax.jit(sharded_evaluate)


def _unsharded(tree):
  if jax.process_count() > 1:
    return multihost_utils.process_allgather(tree, tiled=True)
  return jax.device_get(tree)


def to_host(state):
  """The whole train state as numpy, full leaves: data_parallel's layout."""
  return _unsharded(canonical.fields(state))


def metrics_to_host(metrics):
  return devices.fetch(metrics)


class Checkpoints:
  """The checkpoint holds every leaf whole (as data_parallel's), gathered to
  the host; Orbax restores it straight onto the fsdp shardings (a
  data_parallel checkpoint too: the same full shapes)."""

  @staticmethod
  def to_checkpoint(tree):
    return _unsharded(tree)

  @staticmethod
  def checkpoint_target(tree):
    return devices.checkpoint_target(tree)

  @staticmethod
  def from_checkpoint(tree, like):
    del like
    return tree


CHECKPOINTS = Checkpoints
from_host = checkpoints.from_host_of(__name__)
