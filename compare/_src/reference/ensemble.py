"""The ensemble on one device: the single-model program once per member.

Each member is the classic single-model program (its own `TrainState`,
initialised from the key the ensemble backends give that member) and steps in
turn on the whole batch. The ensemble's prediction is the mean of the
members' probabilities. Nothing else flows between members, so each member
must match its twin in the parallel backends on its own.
"""

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from compare._src.reference import OneDevice
from shardport.workloads import canonical
from shardport.workloads import ensemble

VARIANTS = ("reference",)
# put_batch takes the whole global batch, in every process alike.
PROCESS_LOCAL_BATCH = False
# Declared as the backends' (shardport.training.protocol): one device, never saved.
BACKEND = "reference"
STEP_TAKES_HOST_LOCAL = False
CHECKPOINTS = None
MEMBERS_PER_DEVICE = None


def make_placement(n_devices):
  """The first device; the device count being emulated does not matter."""
  return OneDevice(jax.local_devices()[0], n_devices)


def create_state(seed, config, placement):
  """One single-model train state per member, a tuple on one device."""
  create_train_state = jax.jit(ensemble.create_train_state,
                               static_argnums=(1, 2, 3))
  keys = jax.device_put(ensemble.member_keys(seed, config.members),
                        placement.device)
  return tuple(create_train_state(key, config.learning_rate, config.momentum,
                                  config.input_shape) for key in keys)


def put_batch(batch, placement):
  return jax.device_put(batch, placement.device)


def make_train_step(config, placement, variant="reference"):
  """One step of every member in turn, then the ensemble's accuracy."""
  assert variant in VARIANTS, variant
  del config, placement

  def apply_model(state, batch):
    (loss, logits), grads = jax.value_and_grad(ensemble.loss_fn, has_aux=True)(
        state.params, batch)
    return grads, loss, jax.nn.softmax(logits)

  def update_model(state, grads):
    return state.apply_gradients(grads=grads)

  def train_step(states, batch):
    # One program holds the members' steps side by side. The barrier keeps
    # XLA from fusing or sharing work across them (the sharded port's
    # `_each_member` says what that costs), so each member runs the
    # single-model step unchanged, whatever the order XLA runs them in.
    new_states, losses, probs = [], [], []
    for state in states:
      grads, loss, member_probs = apply_model(
          *lax.optimization_barrier((state, batch)))
      new_states.append(update_model(state, grads))
      losses.append(loss)
      probs.append(member_probs)
    ensemble_probs = jnp.mean(jnp.stack(probs), axis=0)
    return tuple(new_states), {
        "member_loss": jnp.stack(losses),
        "accuracy": ensemble.accuracy(ensemble_probs, batch["targets"])}

  return jax.jit(train_step, donate_argnums=0)


def make_evaluate(config, placement):
  """Every member's metric sums, then the ensemble's."""
  del config, placement

  def evaluate(states, batch):
    logits = [ensemble.loss_fn(state.params, batch)[1] for state in states]
    sums = [ensemble.member_sums(l, batch["targets"]) for l in logits]
    probs = jnp.mean(jnp.stack([jax.nn.softmax(l) for l in logits]), axis=0)
    return {**jax.tree.map(lambda *xs: jnp.stack(xs), *sums),
            **ensemble.ensemble_sums(probs, batch["targets"])}

  return jax.jit(evaluate)


def to_host(state):
  """The whole train state as numpy (`shardport.workloads.canonical.fields`), members
  stacked on a leading axis."""
  members = jax.device_get([canonical.fields(s) for s in state])
  return jax.tree.map(lambda *xs: np.stack(xs), *members)


def metrics_to_host(metrics):
  """Metrics as numpy, plus `loss`, the mean member loss, where given."""
  host = jax.device_get(metrics)
  if "member_loss" in host:
    host["loss"] = host["member_loss"].mean()
  return host
