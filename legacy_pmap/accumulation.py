"""Gradient accumulation in the classic pmap data-parallel program.

Each device splits its slice of the global batch into K equal microbatches,
averages their gradients, and only then averages across devices with one
`lax.pmean`: one cross-device reduction and one optimiser update per step.
"""


import jax
from jax import lax

from legacy_pmap import data_parallel
from legacy_pmap import devices
from shardport.training import checkpoints
from shardport.workloads import batches
from shardport.workloads import microbatches
from shardport.workloads import registry

VARIANTS = ("pmap",)
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
  """The initial train state, one replica per device."""
  return devices.replicate(microbatches.init_state(seed, config), placement)


# region: accum-train-step
def make_train_step(config, placement, variant="pmap"):
  """The compiled step `(state, batch) -> (state, {"loss"})`.

  Under `multisteps` one call takes one microbatch of `batch` and every K-th
  call updates the params (`microbatches.calls_per_step`).

  Raises:
    batches.MicrobatchError: the global batch does not split into devices x
      `config.accum_steps` equal microbatches.
  """
  assert variant in VARIANTS, variant
  workload = registry.get(config.workload)
  n_shards = len(placement)
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

  step = jax.pmap(train_step, axis_name=devices.AXIS, devices=placement,
                  donate_argnums=0)
  return step
# endregion

