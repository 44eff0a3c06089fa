"""An ensemble whose members train data-parallel, on a 2-D mesh: the ports.

The nested pmap's two axes are one `members` x `data` mesh: member m's train
state lives on row m, split over `members` and replicated over `data`
(`P('members')`). Every member trains on the same global batch, split over
its row's devices (`P('data')`). Each member's gradient is averaged over its
own devices only, a `lax.pmean` over `data`; the ensemble predicts with the
mean of its members' probabilities, a `lax.pmean` over `members`.
`shard_map` keeps the nested program's explicit collectives; `jit` lets the
compiler place them.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from sharded import devices
from shardport.training import checkpoints
from shardport.workloads import canonical
from shardport.workloads import ensemble

# The jit port by how the CNN's hidden convolution meets the members' vmap
# (`ensemble.HIDDEN_CONVS`): "jit", lax's own, gathered whole;
# "jit_einsum_conv", an einsum split over `members` but rounded otherwise,
# its ReLU flips excused only by the nudged retakes; "jit_member_conv",
# batch-grouped and split over `members` (docs/jax-facts.md,
# bench/runners/jit_ports.py).
VARIANTS = ("shard_map", "jit", "jit_einsum_conv", "jit_member_conv")
_HIDDEN_CONV = {"jit": "grouped", "jit_einsum_conv": "einsum",
                "jit_member_conv": "member"}
make_placement = devices.placement
# put_batch takes the whole global batch, the same in every process: every
# member trains on all of it.
PROCESS_LOCAL_BATCH = False
# The backend's declared differences (shardport.strategies.protocol).
BACKEND = devices.BACKEND
STEP_TAKES_HOST_LOCAL = devices.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = devices.MemberCheckpoints
from_host = checkpoints.from_host_of(__name__)

_MEMBERS, _DATA, _REPLICATED = (P(devices.MEMBERS_AXIS), P(devices.DATA_AXIS),
                                P())


def why_unavailable():
  """Why this program cannot run on this jax, or None where it runs.

  Returns:
    None: the port calls no pmap.
  """
  return None


def _member(tree):
  """This device's member of a `P('members')` block: `[1, ...] -> [...]`
  (one member per row of the mesh)."""
  return jax.tree.map(lambda x: x[0], tree)


def _stacked(tree):
  """One member's tree as its `[1, ...]` block of the stacked members."""
  return jax.tree.map(lambda x: jnp.asarray(x)[None], tree)


@functools.cache
def _create_train_state(mesh):
  """The compiled init for one mesh, built once (as `sharded.ensemble`'s:
  jit caches compilations per function, and shard_map makes a new one)."""
  def init(key, learning_rate, momentum, input_shape):
    return _stacked(ensemble.create_train_state(_member(key), learning_rate,
                                                momentum, input_shape))

  return jax.jit(jax.shard_map(init, mesh=mesh,
                               in_specs=(_MEMBERS, None, None, None),
                               out_specs=_MEMBERS),
                 static_argnums=(1, 2, 3))


def create_state(seed, config, placement):
  """The members' initial train states, each from its own key, each member
  on every device of its row."""
  mesh = devices.member_data_mesh(placement, config.members)
  keys = devices.shard_members(
      ensemble.member_keys(seed, config.members), mesh)
  return _create_train_state(mesh)(
      keys, config.learning_rate, config.momentum, config.input_shape)


def put_batch(batch, placement):
  """The global host batch, one whole copy per device (`devices.replicate`):
  each step takes its rows of it (`P('data')`) where it runs, with no
  transfer, whatever the mesh's member count."""
  return devices.replicate(batch, placement)


# region: ensemble-data-train-step
def make_train_step(config, placement, variant="shard_map"):
  """The compiled step `(state, batch) -> (state, metrics)`.

  The metrics are each member's loss (`member_loss`) and the ensemble's
  training accuracy (`accuracy`), as the ensemble reports them.
  """
  assert variant in VARIANTS, variant
  mesh = devices.member_data_mesh(placement, config.members)

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

  def global_train_step(state, batch):
    # The members stacked (vmapped), their batch split over `data`: the
    # compiler places the collectives. vmapped, `lax.conv` over the members'
    # kernels is a grouped convolution, which it gathers across the mesh (9
    # all-gathers a step on XLA:CPU, far slower than shard_map: the measured
    # ratio is in docs/BEYOND-ONE-AXIS.md; `spmd_axis_name` changes none
    # of it). Batch-grouped
    # ("jit_member_conv") it is split over `members` (docs/jax-facts.md).
    batch = lax.with_sharding_constraint(batch, NamedSharding(mesh, _DATA))
    return ensemble.stacked_train_step(state, batch, _HIDDEN_CONV[variant],
                                       mesh.shape[devices.DATA_AXIS])

  members = NamedSharding(mesh, _MEMBERS)
  if variant.startswith("jit"):
    return jax.jit(global_train_step, out_shardings=(members, {
        "member_loss": members,
        "accuracy": NamedSharding(mesh, _REPLICATED)}), donate_argnums=0)

  def member_step(state, batch):
    state, metrics = train_step(_member(state), batch)
    return _stacked(state), {**metrics,
                             "member_loss": metrics["member_loss"][None]}

  # check_vma=False gives `grad` each device's own gradient, as under pmap,
  # so the pmean over `data` above is right: the params are replicated over
  # `data`, and with check_vma=True their gradient would already be summed
  # over it (the gradient trap in docs/MIGRATION.md).
  step = jax.shard_map(member_step, mesh=mesh, in_specs=(_MEMBERS, _DATA),
                       out_specs=(_MEMBERS, {"member_loss": _MEMBERS,
                                             "accuracy": _REPLICATED}),
                       check_vma=False)
  return jax.jit(step, donate_argnums=0)
# endregion


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> per-member and ensemble metric sums`.

  Returns `member_loss_sum` and `member_correct` (one per member), and the
  ensemble's `ensemble_correct`, `ensemble_probs` and the example `count`.
  """
  mesh = devices.member_data_mesh(placement, config.members)

  def evaluate(state, batch):
    _, logits = ensemble.loss_fn(state.params, batch)
    probs = lax.pmean(jax.nn.softmax(logits), axis_name=devices.MEMBERS_AXIS)
    sums = {**ensemble.member_sums(logits, batch["targets"]),
            **ensemble.ensemble_sums(probs, batch["targets"])}
    # The sums over each member's devices; the probabilities stay per shard.
    probs = sums.pop("ensemble_probs")
    return {**lax.psum(sums, axis_name=devices.DATA_AXIS),
            "ensemble_probs": probs}

  def member_evaluate(state, batch):
    sums = evaluate(_member(state), batch)
    return {name: value[None] if name.startswith("member_") else value
            for name, value in sums.items()}

  out_specs = {"member_loss_sum": _MEMBERS, "member_correct": _MEMBERS,
               "ensemble_correct": _REPLICATED, "ensemble_probs": _DATA,
               "count": _REPLICATED}
  return jax.jit(jax.shard_map(member_evaluate, mesh=mesh,
                               in_specs=(_MEMBERS, _DATA),
                               out_specs=out_specs))


def to_host(state):
  """The whole train state as numpy (`shardport.workloads.canonical.fields`), with a
  leading member axis."""
  return devices.fetch_members(canonical.fields(state))


def metrics_to_host(metrics):
  """Metrics as numpy: `member_*` per member, the rest the ensemble's.

  Adds `loss`, the mean of the members' losses, where `member_loss` is given.
  """
  host = devices.fetch_members(metrics)
  if "member_loss" in host:
    host["loss"] = host["member_loss"].mean()
  return host
