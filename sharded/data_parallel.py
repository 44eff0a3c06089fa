"""Data-parallel training on a mesh: the shard_map port and the jit port.

The train state is replicated (`P()`) and the global batch is split over the
`data` axis (`P('data')`). `shard_map` keeps the classic program's explicit
collectives; `jit` lets the compiler place them, its matmul kernels cast to
`P(reduced=...)` so that it places them where shard_map does
("jit_plain", without the cast, is the measured "before":
bench/runners/jit_ports.py).
"""


import jax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sharded import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.workloads import registry

VARIANTS = ("shard_map", "jit", "jit_plain")
# put_batch takes this process's rows of the global batch (all of them in
# one process): each process reads only its slice.
PROCESS_LOCAL_BATCH = True
# The backend's declared differences (shardport.strategies.protocol).
BACKEND = devices.BACKEND
STEP_TAKES_HOST_LOCAL = devices.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = devices
from_host = checkpoints.from_host_of(__name__)
make_placement = devices.placement


def create_state(seed, config, placement):
  """The initial train state, replicated over the mesh."""
  return devices.replicate(registry.init_state(seed, config), placement)


def put_batch(batch, placement):
  """A global host batch split over the mesh's `data` axis."""
  return devices.shard_batch(batch, placement)


# region: dp-train-step
def make_train_step(config, placement, variant="shard_map"):
  """The compiled step `(state, batch) -> (state, {"loss"})`."""
  assert variant in VARIANTS, variant
  workload = registry.get(config.workload)
  n_shards = placement.shape[devices.AXIS]

  def train_step(state, batch):
    # The per-device loss (summed over the local batch for the CNN) is
    # differentiated locally; pmean then averages the gradients: the global
    # loss is mean-over-devices of per-device losses.
    loss, grads = jax.value_and_grad(workload.loss)(state.params, batch, 1)
    grads = lax.pmean(grads, axis_name=devices.AXIS)
    loss = lax.pmean(loss, axis_name=devices.AXIS)
    return state.apply_gradients(grads=grads), {"loss": loss}

  def global_train_step(state, batch):
    # Same loss semantics on the global batch: sum / n_shards for the CNN.
    loss, grads = jax.value_and_grad(workload.loss)(state.params, batch,
                                                    n_shards)
    return state.apply_gradients(grads=grads), {"loss": loss}

  def reduced_grads(params, batch):
    # Left to itself the partitioner all-reduces a matmul kernel's gradient
    # at its dot, before autodiff's transpose of it, and XLA:CPU then
    # transposes the reduced gradient in the update: 0.88x shard_map's
    # examples/s (bench/runners/jit_ports.py). A kernel cast to `reduced`
    # (free: it is a full copy already) has an `unreduced` gradient, per-device
    # partial sums, until the one reshard to P(): reduced after the
    # transpose, as shard_map's pmean is. jax 0.10.2 has no such rule for
    # convolutions (docs/performance-notes.md), so only matrices are cast.
    loss, grads = jax.value_and_grad(workload.loss)(
        jax.tree.map(_reduced_if_matrix, params), batch, n_shards)
    return loss, jax.reshard(grads, P())

  def reduced_train_step(state, batch):
    with jax.sharding.use_abstract_mesh(placement.abstract_mesh):
      loss, grads = jax.sharding.explicit_axes(
          reduced_grads, axes=devices.AXIS,
          in_sharding=(P(), P(devices.AXIS)))(state.params, batch)
    return state.apply_gradients(grads=grads), {"loss": loss}

  replicated = NamedSharding(placement, P())
  if variant.startswith("jit"):
    step = reduced_train_step if variant == "jit" else global_train_step
    return jax.jit(step, out_shardings=replicated, donate_argnums=0)
  # check_vma=False gives `grad` the per-device gradient, as under pmap, so
  # the pmean above is right. With check_vma=True the gradient of a P()
  # input is already summed over the axis and that pmean makes it N times
  # too large (the gradient trap in docs/MIGRATION.md).
  step = jax.shard_map(train_step, mesh=placement,
                       in_specs=(P(), P(devices.AXIS)), out_specs=P(),
                       check_vma=False)
  return jax.jit(step, donate_argnums=0)
# endregion


def _reduced_if_matrix(param):
  return (jax.reshard(param, P(reduced={devices.AXIS})) if param.ndim == 2
          else param)


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> {"loss_sum", "correct", "count"}`."""
  workload = registry.get(config.workload)

  def evaluate(state, batch):
    sums = workload.metric_sums(state.params, batch)
    return lax.psum(sums, axis_name=devices.AXIS)

  return jax.jit(jax.shard_map(evaluate, mesh=placement,
                               in_specs=(P(), P(devices.AXIS)),
                               out_specs=P()))


def to_host(state):
  """The whole train state as numpy, in the canonical layout (no device
  axis): `shardport.workloads.canonical.fields`."""
  return devices.fetch(canonical.fields(state))


def metrics_to_host(metrics):
  """Step or evaluation metrics as numpy scalars."""
  return devices.fetch(metrics)
