"""The data-parallel program on one device with the global batch."""

import jax

from compare._src.reference import OneDevice
from shardport.workloads import canonical
from shardport.workloads import registry

VARIANTS = ("reference",)
# put_batch takes the whole global batch; with many processes every process
# runs the reference alike on its own first device.
PROCESS_LOCAL_BATCH = False
# Declared as the backends' (shardport.training.protocol): one device, never saved.
BACKEND = "reference"
STEP_TAKES_HOST_LOCAL = False
CHECKPOINTS = None


def make_placement(n_devices):
  """This process's first device; `n_devices` per process are emulated.

  The loss is normalised as on all processes' devices together.
  """
  return OneDevice(jax.local_devices()[0], n_devices * jax.process_count())


def create_state(seed, config, placement):
  return jax.device_put(registry.init_state(seed, config),
                        placement.device)


def put_batch(batch, placement):
  return jax.device_put(batch, placement.device)


def make_train_step(config, placement, variant="reference"):
  """One step on the global batch with the ports' loss normalisation."""
  assert variant in VARIANTS, variant
  workload = registry.get(config.workload)

  def train_step(state, batch):
    loss, grads = jax.value_and_grad(workload.loss)(
        state.params, batch, placement.loss_divisor)
    return state.apply_gradients(grads=grads), {"loss": loss}

  return jax.jit(train_step, donate_argnums=0)


def make_evaluate(config, placement):
  del placement
  workload = registry.get(config.workload)
  return jax.jit(lambda state, batch: workload.metric_sums(state.params, batch))


def to_host(state):
  """The whole train state as numpy (`shardport.workloads.canonical.fields`)."""
  return jax.device_get(canonical.fields(state))


def metrics_to_host(metrics):
  return jax.device_get(metrics)
