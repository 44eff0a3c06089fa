"""Ensemble training, the classic pmap program ("ensembling on multiple devices").

Each device holds one member of the ensemble, initialised from its own key.
Every member trains on the same replicated batch with its own loss and
gradients; the ensemble predicts with the mean of its members' softmax
probabilities, a `lax.pmean` over the devices.
"""

import jax
from jax import lax

from legacy_pmap import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.workloads import ensemble

VARIANTS = ("pmap",)
make_placement = devices.ensemble_placement
# put_batch takes the whole global batch, the same in every process: every
# member trains on all of it.
PROCESS_LOCAL_BATCH = False
# The backend's declared differences (shardport.strategies.protocol).
BACKEND = devices.BACKEND
STEP_TAKES_HOST_LOCAL = devices.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = devices.MemberCheckpoints
from_host = checkpoints.from_host_of(__name__)
MEMBERS_PER_DEVICE = 1


def create_state(seed, config, placement):
  """The members' initial train states, each from its own key."""
  ensemble.check_members(config.members, len(placement), MEMBERS_PER_DEVICE)
  # The axis name is unused inside, but it names the mesh of the arrays
  # pmap returns: without it their sharding differs from what the train
  # step returns, and the jitted step compiles a second time on step two.
  create_train_state = jax.pmap(ensemble.create_train_state,
                                axis_name=devices.ENSEMBLE_AXIS,
                                static_broadcasted_argnums=(1, 2, 3),
                                devices=placement)
  return create_train_state(devices.shard_members(
      ensemble.member_keys(seed, config.members), placement),
                            config.learning_rate, config.momentum,
                            config.input_shape)


def put_batch(batch, placement):
  """A global host batch, one whole copy per device (`devices.replicate`)."""
  return devices.replicate(batch, placement)


# region: ensemble-train-step
def make_train_step(config, placement, variant="pmap"):
  """The compiled step `(state, batch) -> (state, metrics)`.

  The metrics are each member's loss (`member_loss`) and the ensemble's
  training accuracy (`accuracy`), which is what the classic program reports.
  """
  assert variant in VARIANTS, variant

  def apply_model(state, batch):
    (loss, logits), grads = jax.value_and_grad(ensemble.loss_fn, has_aux=True)(
        state.params, batch)
    # Only the prediction is shared: the mean of the members' probabilities,
    # one member per device, so a mean over the device axis.
    probs = lax.pmean(jax.nn.softmax(logits), axis_name=devices.ENSEMBLE_AXIS)
    return grads, {"member_loss": loss,
                   "accuracy": ensemble.accuracy(probs, batch["targets"])}

  def update_model(state, grads):
    return state.apply_gradients(grads=grads)

  apply_model = jax.pmap(apply_model, axis_name=devices.ENSEMBLE_AXIS,
                         devices=placement)
  # The old state is not needed after the update: its buffers are reused.
  update_model = jax.pmap(update_model, axis_name=devices.ENSEMBLE_AXIS,
                          devices=placement, donate_argnums=0)

  def train_step(state, batch):
    grads, metrics = apply_model(state, batch)
    return update_model(state, grads), metrics

  def lower_each(state, batch):
    """The two pmaps lowered as they run: what to count, program by program."""
    # The gradients are shaped as the params: lowering needs no more. (Not
    # eval_shape of apply_model: under many processes it gives other shapes
    # than the host-local ones pmap takes.)
    grads = state.params
    return [apply_model.lower(state, batch), update_model.lower(state, grads)]

  # The classic program calls the two pmaps one after the other from Python,
  # and so does this step: two executables, two dispatches, the gradients
  # handed from one to the other on the devices. `lower_each` lowers those
  # two programs, to count as they run (not under one `jit`: under the
  # original runtime jit over pmap is another execution path, which holds
  # every member on every device and 11 all-reduces; jax 0.9.2, 8 devices).
  train_step.lower_each = lower_each
  return train_step
# endregion


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> per-member and ensemble metric sums`.

  Returns `member_loss_sum` and `member_correct` (one per member), and the
  ensemble's `ensemble_correct`, `ensemble_probs` and the example `count`.
  """
  del config  # the program is the same for every ensemble size

  def evaluate(state, batch):
    _, logits = ensemble.loss_fn(state.params, batch)
    probs = lax.pmean(jax.nn.softmax(logits), axis_name=devices.ENSEMBLE_AXIS)
    return {**ensemble.member_sums(logits, batch["targets"]),
            **ensemble.ensemble_sums(probs, batch["targets"])}

  return jax.pmap(evaluate, axis_name=devices.ENSEMBLE_AXIS, devices=placement)


def to_host(state):
  """The whole train state as numpy (`shardport.workloads.canonical.fields`), with a
  leading member axis."""
  return devices.fetch_members(canonical.fields(state))


def metrics_to_host(metrics):
  """Metrics as numpy: `member_*` per member, the rest the ensemble's.

  Adds `loss`, the mean of the members' losses, where `member_loss` is given.
  """
  host = {name: devices.fetch_members(value) if name.startswith("member_")
          else devices.fetch(value) for name, value in metrics.items()}
  if "member_loss" in host:
    host["loss"] = host["member_loss"].mean()
  return host
