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
import math

import jax
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
import numpy as np
from jax.sharding import PartitionSpec as P

from sharded import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.workloads import digest
from shardport.strategies import fsdp
from shardport.workloads import registry

# "jit_unconstrained": the jit port before its fix (no constraint on the
# params or the gradient), kept to measure against
# (bench/runners/jit_ports.py); no strategy runs it.
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


# The bytes of one block `_host_blocks` reads: a process holds a few times
# this at once (the block, its copy on one device, the merged block), never
# a leaf, so a digest costs next to nothing beside the state.
BLOCK_BYTES = 1 << 20


@functools.partial(jax.jit, static_argnums=2)
def _rows(data, start, count):
  # `count` static, `start` traced: one compile per shard shape, not per
  # block.
  return lax.dynamic_slice_in_dim(data, start, count)


def _windows(x, rows):
  """The row ranges `_host_blocks` reads, the same in every process: at
  most `rows` rows each, none across the boundary of a shard's rows."""
  cuts = sorted({0, x.shape[0]} | {
      index[0].indices(x.shape[0])[0]
      for index in x.sharding.devices_indices_map(x.shape).values()})
  return [(start, min(start + rows, stop)) for lo, stop in zip(cuts, cuts[1:])
          for start in range(lo, stop, rows)]


def _fill(block, x, start, stop, rows):
  """Writes rows `start:stop` of `x` that this process's shards hold (one
  copy of each) into `block`, reading at most `rows` rows of a shard at a
  time; the rest of `block` stays as it is."""
  for shard in x.addressable_shards:
    if shard.replica_id:
      continue
    first, last, _ = shard.index[0].indices(x.shape[0])
    if not first <= start < last:
      continue  # another shard's rows (windows never straddle shards)
    count, read = stop - start, min(rows, last - first)
    if read == last - first:
      got = jax.device_get(shard.data)[start - first:stop - first]
    else:
      # Every block of the shard is read at one length (one compile): the
      # last one starts earlier and drops the rows read twice.
      at = min(start - first, last - first - read)
      got = jax.device_get(_rows(shard.data, at, read))
      got = got[start - first - at:][:count]
    block[(slice(0, count), *shard.index[1:])] = got


@functools.lru_cache(maxsize=None)
def _merger(devices):
  """`merge(window)`: every process's window of bytes (a multiple of 4),
  merged by max over one device of each process in `devices`; the result on
  every process."""
  mesh = jax.sharding.Mesh(np.array(devices), ("processes",))
  mine = next(d for d in devices if d.process_index == jax.process_index())
  reduce = jax.jit(lambda w: w.max(axis=0),
                   out_shardings=NamedSharding(mesh, P()))

  def merge(window):
    # As 4-byte words (8 would be cut to 4 without jax_enable_x64): gloo's
    # max over 1 MiB takes half its time over bytes (measured, 2 processes
    # on CPU), and max(w, 0) is w too.
    words = window.view(np.uint32)
    stacked = jax.make_array_from_single_device_arrays(
        (len(devices), words.size), NamedSharding(mesh, P("processes")),
        [jax.device_put(words[None], mine)])
    return np.asarray(reduce(stacked).addressable_data(0)).view(np.uint8)

  return merge


def _host_blocks(x):
  """The values of the global array `x` in C order, block by block, on
  every process, for `digest.streamed_digest`.

  A leaf split over the processes is read a window of whole rows (its first
  axis) at a time: each process writes the bytes its shards hold into the
  window, zeros elsewhere, and the windows are merged bytewise by max, each
  byte being held by exactly one process (max(b, 0) is b: the bytes cross
  as they are, so the digest is `to_host`'s). Every process must read the
  same leaves in the same order (the merge is collective).
  """
  if x.is_fully_replicated:  # fsdp's unsplit leaves: a few bytes each
    yield jax.device_get(x.addressable_shards[0].data)
    return
  row = x.dtype.itemsize * math.prod(x.shape[1:])
  if not row:
    return  # no bytes
  rows = max(1, BLOCK_BYTES // row)
  # One padded size per leaf (most leaves: BLOCK_BYTES), so that the merge
  # compiles once for most leaves.
  size = -(-rows * row // BLOCK_BYTES) * BLOCK_BYTES
  merge = None
  if not x.is_fully_addressable:
    processes = {}
    for device in sorted(x.sharding.device_set,
                         key=lambda d: (d.process_index, d.id)):
      processes.setdefault(device.process_index, device)
    merge = _merger(tuple(processes[p] for p in sorted(processes)))
  for start, stop in _windows(x, rows):
    window = np.zeros(size, np.uint8)
    nbytes = (stop - start) * row
    block = window[:nbytes].view(x.dtype).reshape(stop - start, *x.shape[1:])
    _fill(block, x, start, stop, rows)
    yield (merge(window) if merge else window)[:nbytes]


class Checkpoints:
  """The checkpoint holds every leaf whole (as data_parallel's), written
  without gathering it: each split leaf is handed to Orbax as the global
  array it is, and every process writes its own shards into the one array of
  the leaf's full shape. Orbax restores it straight onto the fsdp shardings,
  each process reading its own shards (a data_parallel checkpoint too: the
  same full shapes)."""

  @staticmethod
  def to_checkpoint(tree):
    # Leaves no axis of which divides (a bias of 10) are replicated: one
    # host copy, as data_parallel saves (sharded.devices.to_checkpoint).
    return jax.tree.map(lambda x: devices.to_checkpoint(x)
                        if x.is_fully_replicated else x, tree)

  @staticmethod
  def checkpoint_target(tree):
    return devices.checkpoint_target(tree)

  @staticmethod
  def from_checkpoint(tree, like):
    del like
    return tree

  @staticmethod
  def state_digest(state, version=digest.VERSION):
    """`to_host`'s digest, read block by block (`_host_blocks`): the record
    each save writes beside the arrays gathers nothing whole either."""
    return digest.streamed_digest(canonical.fields(state), _host_blocks,
                                  version)


CHECKPOINTS = Checkpoints
from_host = checkpoints.from_host_of(__name__)
