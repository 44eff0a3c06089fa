"""An ensemble whose members train data-parallel: the classic nested pmap.

The outer pmap maps the members, the inner one each member's devices: the
devices form a `members` x `data` grid, and member m's train state is
replicated over the D devices of its row (`[members, data, ...]`). Every
member trains on the same global batch, split over its row's devices. Each
member's gradient is averaged over its own devices only, a `lax.pmean` over
the inner axis; the ensemble predicts with the mean of its members'
probabilities, a `lax.pmean` over the outer axis.

jax 0.10 refuses a pmap inside a pmap (`why_unavailable`); the original
runtime (jax 0.9.2 with JAX_PMAP_SHMAP_MERGE=0) runs it.
"""

import functools

import jax
from jax import lax
import numpy as np

from legacy_pmap import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.workloads import ensemble

VARIANTS = ("pmap",)
make_placement = devices.placement
# put_batch takes the whole global batch, the same in every process: every
# member trains on all of it.
PROCESS_LOCAL_BATCH = False
# The backend's declared differences (shardport.strategies.protocol).
BACKEND = devices.BACKEND
STEP_TAKES_HOST_LOCAL = devices.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = devices.MemberReplicas
from_host = checkpoints.from_host_of(__name__)


def why_unavailable():
  """Why this program cannot run on this jax, or None where it runs.

  Returns:
    The error a nested pmap raises here, quoted in one line (jax >= 0.10:
    "The context mesh ... should match the mesh passed to shard_map"), or
    None (the original runtime).
  """
  return _nested_pmap_error()


@functools.cache
def _nested_pmap_error():
  """Tries a nested pmap over one device once, with this program's axes.

  Probed, not inferred from the version: the capability is what matters,
  and a jax that ran nested pmaps again would run this program.
  """
  probe = jax.pmap(jax.pmap(lambda x: lax.pmean(x, devices.DATA_AXIS),
                            axis_name=devices.DATA_AXIS),
                   axis_name=devices.MEMBERS_AXIS,
                   devices=jax.local_devices()[:1])
  try:
    jax.block_until_ready(probe(np.zeros((1, 1), np.float32)))
  except Exception as err:  # pylint: disable=broad-except
    # Any refusal is quoted: jax 0.10 raises a ValueError.
    message = (str(err).strip().splitlines() or [""])[0]
    return (f"nested pmap fails on jax {jax.__version__}: "
            f"{type(err).__name__}: {message}")
  return None


def _nested_pmap(fn, placement, static=(), **kwargs):
  """`fn` of one device, mapped over the `[members, data]` device grid:
  the inner pmap over each member's devices, the outer over the members.
  `static` argument numbers are static at both levels."""
  return jax.pmap(jax.pmap(fn, axis_name=devices.DATA_AXIS,
                           static_broadcasted_argnums=static),
                  axis_name=devices.MEMBERS_AXIS, devices=list(placement),
                  static_broadcasted_argnums=static, **kwargs)


def _nested_batch(batch, shape):
  """A global host batch as the nested pmap takes it, `[members, data, b,
  ...]`: every member's row the whole batch split over its devices.

  Numpy views, no copy: pmap copies each device's block to it, as the
  classic program's `shard(batch)` then `p_train_step` did.
  """
  members, data = shape

  def split(x):
    x = np.asarray(x)
    x = x.reshape(data, x.shape[0] // data, *x.shape[1:])
    return np.broadcast_to(x, (members, *x.shape))

  return jax.tree.map(split, batch)


@functools.cache
def _create_train_state(placement):
  """The nested init for one device list, built once (pmap caches its
  compilations per function object, and a nested pmap is a new one)."""
  return _nested_pmap(ensemble.create_train_state, placement,
                      static=(1, 2, 3))


def create_state(seed, config, placement):
  """The members' initial train states, each from its own key, each member
  on every device of its row."""
  members, data = devices.member_data_mesh(placement, config.members).shape
  keys = ensemble.member_keys(seed, members)
  # Member m's key on each device of its row: its replicas start equal.
  rows = np.repeat(np.asarray(jax.random.key_data(keys))[:, None], data, 1)
  keys = jax.random.wrap_key_data(rows, impl=jax.random.key_impl(keys))
  return _create_train_state(tuple(placement))(
      keys, config.learning_rate, config.momentum, config.input_shape)


def put_batch(batch, placement):
  """The global host batch as it is: the step splits it the classic way
  (`_nested_batch`, which needs the member count) and pmap copies it over."""
  del placement
  return batch


# region: ensemble-data-train-step
def make_train_step(config, placement, variant="pmap"):
  """The compiled step `(state, batch) -> (state, metrics)`.

  The metrics are each member's loss (`member_loss`) and the ensemble's
  training accuracy (`accuracy`), as the ensemble reports them.
  """
  assert variant in VARIANTS, variant
  shape = devices.member_data_mesh(placement, config.members).shape

  def train_step(state, batch):
    (loss, logits), grads = jax.value_and_grad(ensemble.loss_fn, has_aux=True)(
        state.params, batch)
    # Each member's gradient is the mean over its own devices only.
    grads = lax.pmean(grads, axis_name=devices.DATA_AXIS)
    loss = lax.pmean(loss, axis_name=devices.DATA_AXIS)
    # Only the prediction is shared between members: their mean probability.
    probs = lax.pmean(jax.nn.softmax(logits), axis_name=devices.MEMBERS_AXIS)
    accuracy = lax.pmean(ensemble.accuracy(probs, batch["targets"]),
                         axis_name=devices.DATA_AXIS)
    return state.apply_gradients(grads=grads), {"member_loss": loss,
                                                "accuracy": accuracy}

  step = _nested_pmap(train_step, placement, donate_argnums=0)

  def nested_step(state, batch):
    return step(state, _nested_batch(batch, shape))

  def lower_each(state, batch):
    """The nested pmap lowered as it runs, to count (the step itself splits
    the host batch first, so it is called as it is)."""
    return [step.lower(state, _nested_batch(batch, shape))]

  nested_step.lower_each = lower_each
  return nested_step
# endregion


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> per-member and ensemble metric sums`.

  Returns `member_loss_sum` and `member_correct` (one per member), and the
  ensemble's `ensemble_correct`, `ensemble_probs` and the example `count`.
  """
  shape = devices.member_data_mesh(placement, config.members).shape

  def evaluate(state, batch):
    _, logits = ensemble.loss_fn(state.params, batch)
    probs = lax.pmean(jax.nn.softmax(logits), axis_name=devices.MEMBERS_AXIS)
    sums = {**ensemble.member_sums(logits, batch["targets"]),
            **ensemble.ensemble_sums(probs, batch["targets"])}
    # The sums over each member's devices; the probabilities stay per shard.
    probs = sums.pop("ensemble_probs")
    return {**lax.psum(sums, axis_name=devices.DATA_AXIS),
            "ensemble_probs": probs}

  evaluate = _nested_pmap(evaluate, placement)
  return lambda state, batch: evaluate(state, _nested_batch(batch, shape))


def to_host(state):
  """The whole train state as numpy (`shardport.workloads.canonical.fields`), with a
  leading member axis: each member's first replica."""
  return jax.tree.map(lambda x: x[:, 0],
                      jax.device_get(canonical.fields(state)))


def metrics_to_host(metrics):
  """Metrics as numpy: `member_*` per member, the rest the ensemble's.

  Every device of a member's row holds its sums; `ensemble_probs` are the
  shards' rows in order. Adds `loss`, the mean of the members' losses,
  where `member_loss` is given.
  """
  def one(name, x):
    if name.startswith("member_"):
      return x[:, 0]
    if name == "ensemble_probs":
      return x[0].reshape(-1, *x.shape[3:])
    return x[0, 0]

  host = {name: one(name, value)
          for name, value in jax.device_get(metrics).items()}
  if "member_loss" in host:
    host["loss"] = host["member_loss"].mean()
  return host
