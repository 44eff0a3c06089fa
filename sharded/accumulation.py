"""Gradient accumulation on a mesh: the shard_map port and the jit port.

Each device splits its slice of the global batch into K equal microbatches,
averages their gradients, and only then averages across devices with one
`lax.pmean` (shard_map): one cross-device reduction and one optimiser update
per step. Under `jit` the compiler places the reduction itself, of
per-device sums that a collective-free `shard_map` computes.
"""


import jax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sharded import data_parallel
from sharded import devices
from shardport.training import checkpoints
from shardport.workloads import batches
from shardport.workloads import microbatches
from shardport.workloads import registry

VARIANTS = ("shard_map", "jit")
make_placement = devices.placement
# Batches, evaluation and metrics are the data-parallel program's own.
put_batch = data_parallel.put_batch
PROCESS_LOCAL_BATCH = data_parallel.PROCESS_LOCAL_BATCH
BACKEND = data_parallel.BACKEND
STEP_TAKES_HOST_LOCAL = data_parallel.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = data_parallel.CHECKPOINTS
from_host = checkpoints.from_host_of(__name__)
make_evaluate = data_parallel.make_evaluate
metrics_to_host = data_parallel.metrics_to_host
# The canonical fields unwrap optax.MultiSteps (shardport.workloads.canonical).
to_host = data_parallel.to_host


def create_state(seed, config, placement):
  """The initial train state, replicated over the mesh."""
  return devices.replicate(microbatches.init_state(seed, config), placement)


# region: accum-train-step
def make_train_step(config, placement, variant="shard_map"):
  """The compiled step `(state, batch) -> (state, {"loss"})`.

  Under `multisteps` one call takes one microbatch of `batch` and every K-th
  call updates the params (`microbatches.calls_per_step`).

  Raises:
    batches.MicrobatchError: the global batch does not split into devices x
      `config.accum_steps` equal microbatches.
  """
  assert variant in VARIANTS, variant
  workload = registry.get(config.workload)
  n_shards = placement.shape[devices.AXIS]
  k = config.accum_steps
  batches.microbatch_size(config.global_batch, n_shards, k)
  microbatches.check_loop(config.accum_loop)
  loop = config.accum_loop

  def microbatch_grad(shards):
    # A microbatch is 1/K of a shard, so its loss is normalised as shards/K
    # shards: for the CNN that is K x its summed loss, and the mean of K such
    # gradients is the gradient of the shard's sum, as without accumulation;
    # for linreg (shards ignored) the mean of K equal-size means is the
    # shard's mean. K a power of two keeps both scalings exact.
    return lambda params, micro: jax.value_and_grad(workload.loss)(
        params, micro, shards / k)

  def train_step(state, batch):
    # Microbatch i is rows i*m:(i+1)*m of this device's own slice.
    split = microbatches.split(batch, k)
    loss, grads = microbatches.mean_grads(microbatch_grad(1), state, split,
                                          loop)
    grads = lax.pmean(grads, axis_name=devices.AXIS)
    loss = lax.pmean(loss, axis_name=devices.AXIS)
    return state.apply_gradients(grads=grads), {"loss": loss}

  if variant == "jit":
    return _jit_train_step(placement, microbatch_grad, k, loop)
  # check_vma=False gives `grad` the per-device gradient, as under pmap, so
  # the one pmean above is right. With check_vma=True the gradient of a P()
  # input is already summed over the axis and that pmean makes it N times
  # too large (the gradient trap in docs/MIGRATION.md).
  step = jax.shard_map(train_step, mesh=placement,
                       in_specs=(P(), P(devices.AXIS)), out_specs=P(),
                       check_vma=False)
  step = jax.jit(step, donate_argnums=0)
  return step


def _jit_train_step(placement, microbatch_grad, k, loop):
  """The jit port's step: the per-device sums a collective-free shard_map
  computes (or, at one microbatch per call, the plain program), reduced
  where jit places the reduction."""
  n_shards = placement.shape[devices.AXIS]

  def device_mean_grads(state, split):
    # This device's K microbatches, averaged here: no collective inside, so
    # nothing reduces a microbatch's gradient on its own. Stacked on a
    # leading device axis for jit to reduce.
    loss, grads = microbatches.mean_grads(microbatch_grad(1), state, split,
                                          loop)
    return jax.tree.map(lambda x: x[None], (loss, grads))

  # Under plain jit the partitioner all-reduces each microbatch's gradient
  # inside its backward pass (replicated params, batch-sharded rows), and
  # XLA:CPU has no pass that sums partial gradients before reducing them:
  # one all-reduce of K gradients (K x the bytes, K x the operands, each a
  # rendezvous of every device), 0.6-0.7x the shard_map step (XLA:CPU, 8
  # emulated devices, jax 0.10.2: docs/accumulation-notes.md). JAX's `reduced`
  # params would defer it, but 0.10.2 has no rule for convolutions. So the
  # per-device sums are spelled out; jit still places the one reduction
  # (docs/performance-notes.md).
  per_device = jax.shard_map(device_mean_grads, mesh=placement,
                             in_specs=(P(), P(None, devices.AXIS)),
                             out_specs=P(devices.AXIS), check_vma=False)
  # One microbatch per call (K=1, multisteps) has nothing to sum first: the
  # plain program, the data-parallel jit step's at K=1.
  one_per_call = k == 1 or loop == "multisteps"

  def global_train_step(state, batch):
    # Microbatch i is made of rows i*m:(i+1)*m of every device's slice, and
    # the constraint keeps each on the devices that hold those rows.
    split = microbatches.split(batch, k, shards=n_shards)
    split = lax.with_sharding_constraint(
        split, NamedSharding(placement, P(None, devices.AXIS)))
    if one_per_call:
      loss, grads = microbatches.mean_grads(microbatch_grad(n_shards), state,
                                            split, loop)
    else:
      loss, grads = jax.tree.map(lambda x: x.mean(0),
                                 per_device(state, split))
    return state.apply_gradients(grads=grads), {"loss": loss}

  return jax.jit(global_train_step,
                 out_shardings=NamedSharding(placement, P()),
                 donate_argnums=0)
# endregion

