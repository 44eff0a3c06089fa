"""Data-parallel training, the classic pmap program.

Each device holds a replica of the train state and a slice of the global
batch; gradients and the loss are averaged across devices with `lax.pmean`.
"""


import jax
from jax import lax

from legacy_pmap import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.workloads import registry

VARIANTS = ("pmap",)
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
  """The initial train state, one replica per device."""
  return devices.replicate(registry.init_state(seed, config), placement)


def put_batch(batch, placement):
  """A global host batch reshaped to `[n_devices, local_batch, ...]`."""
  return devices.shard_batch(batch, placement)


# region: dp-train-step
def make_train_step(config, placement, variant="pmap"):
  """The compiled step `(state, batch) -> (state, {"loss"})`."""
  assert variant in VARIANTS, variant
  workload = registry.get(config.workload)

  def train_step(state, batch):
    # The per-device loss (summed over the local batch for the CNN) is
    # differentiated locally; pmean then averages the gradients: the global
    # loss is mean-over-devices of per-device losses.
    loss, grads = jax.value_and_grad(workload.loss)(state.params, batch, 1)
    grads = lax.pmean(grads, axis_name=devices.AXIS)
    loss = lax.pmean(loss, axis_name=devices.AXIS)
    return state.apply_gradients(grads=grads), {"loss": loss}

  return jax.pmap(train_step, axis_name=devices.AXIS, devices=placement,
                  donate_argnums=0)
# endregion


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> {"loss_sum", "correct", "count"}`."""
  workload = registry.get(config.workload)

  def evaluate(state, batch):
    sums = workload.metric_sums(state.params, batch)
    return lax.psum(sums, axis_name=devices.AXIS)

  return jax.pmap(evaluate, axis_name=devices.AXIS, devices=placement)


def to_host(state):
  """The whole train state as numpy, in the canonical layout (no device
  axis): `shardport.workloads.canonical.fields`."""
  return devices.fetch(canonical.fields(state))


def metrics_to_host(metrics):
  """Step or evaluation metrics as numpy scalars."""
  return devices.fetch(metrics)
