"""Ensemble training on a mesh, the shard_map port of the classic program.

Each device holds one or more members of the ensemble, each initialised from
its own key, stacked on a leading axis split over the mesh's `ensemble` axis
(`P('ensemble')`).
Every member trains on the same replicated batch with its own loss and
gradients; the ensemble predicts with the mean of its members' softmax
probabilities, a `lax.pmean` over the devices.
Plain `jit(vmap(...))` over the stacked members all-gathers them
(docs/ensemble-notes.md); the jit port is `jit(vmap(...))` with the CNN's
hidden convolution batch-grouped (`shardport.workloads.member_conv`), which
XLA splits over the members (bench/runners/jit_ports.py).
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

# The members-stacked jit steps, by how the CNN's hidden convolution meets
# the members' vmap (`ensemble.HIDDEN_CONVS`), measured by
# bench/runners/jit_ports.py: "jit_grouped_conv" all-gathers the members'
# convolutions; "jit_einsum_conv" does not, but rounds the forward pass
# otherwise (ReLU flips that only the nudged retakes excuse);
# "jit_member_conv" splits them over the members (docs/jax-facts.md).
VARIANTS = ("shard_map", "jit_grouped_conv", "jit_einsum_conv",
            "jit_member_conv")
_HIDDEN_CONV = {"jit_grouped_conv": "grouped", "jit_einsum_conv": "einsum",
                "jit_member_conv": "member"}
make_placement = devices.ensemble_placement
# put_batch takes the whole global batch, the same in every process: every
# member trains on all of it.
PROCESS_LOCAL_BATCH = False
# The backend's declared differences (shardport.strategies.protocol).
BACKEND = devices.BACKEND
STEP_TAKES_HOST_LOCAL = devices.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = devices.MemberCheckpoints
from_host = checkpoints.from_host_of(__name__)
MEMBERS_PER_DEVICE = None

_MEMBERS, _REPLICATED = P(devices.ENSEMBLE_AXIS), P()


def _each_member(fn, members, *shared, vmapped=False):
  """`fn(*member, *shared)` for each of this device's members, stacked.

  `members` is a tuple of trees with a leading member axis. With `vmapped`
  the members are batched with `jax.vmap`. By default they run one after
  another instead: batching them turns the backward
  convolutions and matmuls into batched ones whose float32 sums round
  differently (1.4e-7 of a leaf's largest value after one step), and SGD at
  the HOWTO's learning rate grows that to 1e-2 (8 members) and 8e-2 (16)
  within five epochs (docs/ensemble-notes.md). Each member's inputs pass an
  optimisation barrier so that XLA cannot fuse or share work across the
  members' copies of the program, which alone cost 1 ulp with two members per
  device. Each member then runs exactly the program pmap and the reference
  run: bitwise equal for any member count.
  """
  if vmapped:
    in_axes = (0,) * len(members) + (None,) * len(shared)
    return jax.vmap(fn, in_axes=in_axes)(*members, *shared)
  count = jax.tree.leaves(members)[0].shape[0]
  outs = [fn(*lax.optimization_barrier(
      (*jax.tree.map(lambda x, i=i: x[i], members), *shared)))
          for i in range(count)]
  return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


@functools.cache
def _create_train_state(placement):
  """The compiled init for one mesh, built once per mesh.

  jit caches compilations per function object, and `shard_map` returns a new
  one on every call: without this cache every `create_state` would compile
  the init again (seconds on CPU), where pmap's own cache reuses it.
  """
  # vmap is safe here (unlike in the step): the init draws random bits and
  # scales them elementwise, which batching leaves bitwise unchanged; and one
  # traced optimiser keeps the stacked states' static fields identical.
  return jax.jit(
      jax.shard_map(jax.vmap(ensemble.create_train_state,
                             in_axes=(0, None, None, None)),
                    mesh=placement, in_specs=(_MEMBERS, None, None, None),
                    out_specs=_MEMBERS),
      static_argnums=(1, 2, 3))


def create_state(seed, config, placement):
  """The members' initial train states, each from its own key."""
  ensemble.check_members(config.members, placement.size, MEMBERS_PER_DEVICE)
  create_train_state = _create_train_state(placement)
  return create_train_state(devices.shard_members(
      ensemble.member_keys(seed, config.members), placement),
                            config.learning_rate, config.momentum,
                            config.input_shape)


def put_batch(batch, placement):
  """A global host batch, one whole copy per device (`devices.replicate`)."""
  return devices.replicate(batch, placement)


# region: ensemble-train-step
def make_train_step(config, placement, variant="shard_map"):
  """The compiled step `(state, batch) -> (state, metrics)`.

  The metrics are each member's loss (`member_loss`) and the ensemble's
  training accuracy (`accuracy`), which is what the classic program reports.
  """
  assert variant in VARIANTS, variant
  vmapped = config.member_loop == "vmap"

  def apply_model(state, batch):
    (loss, logits), grads = _each_member(
        jax.value_and_grad(ensemble.loss_fn, has_aux=True), (state.params,),
        batch, vmapped=vmapped)
    # Only the prediction is shared: the mean over this device's members,
    # then over the devices. Every device holds as many members, so the mean
    # of the means is the mean over all members.
    probs = lax.pmean(jax.nn.softmax(logits).mean(0),
                      axis_name=devices.ENSEMBLE_AXIS)
    return grads, {"member_loss": loss,
                   "accuracy": ensemble.accuracy(probs, batch["targets"])}

  def update_model(state, grads):
    # The update (SGD with momentum) is elementwise, so batching it over this
    # device's members rounds exactly as member by member: vmapped always.
    # The per-member barrier and stack cost 16 copies and 328 KiB of temp
    # here (docs/performance-notes.md).
    return _each_member(lambda member, g: member.apply_gradients(grads=g),
                        (state, grads), vmapped=True)

  # The params are split over the axis, not replicated, so the gradient trap
  # of data-parallel ports cannot occur and check_vma stays on.
  apply_model = jax.shard_map(
      apply_model, mesh=placement, in_specs=(_MEMBERS, _REPLICATED),
      out_specs=(_MEMBERS, {"member_loss": _MEMBERS, "accuracy": _REPLICATED}))
  update_model = jax.shard_map(update_model, mesh=placement,
                               in_specs=(_MEMBERS, _MEMBERS),
                               out_specs=_MEMBERS)

  def train_step(state, batch):
    grads, metrics = apply_model(state, batch)
    return update_model(state, grads), metrics

  def global_train_step(state, batch):
    # The members stacked (vmapped) and split over the mesh, the batch
    # replicated: the compiler places the collectives. Each device runs one
    # member's forward pass at a time, as shard_map does (bitwise); the
    # vmapped backward pass sums in another order (close, not bitwise).
    return ensemble.stacked_train_step(
        state, batch, _HIDDEN_CONV[variant],
        member_shards=placement.shape[devices.ENSEMBLE_AXIS])

  if variant.startswith("jit"):
    members = NamedSharding(placement, _MEMBERS)
    return jax.jit(global_train_step, out_shardings=(members, {
        "member_loss": members,
        "accuracy": NamedSharding(placement, _REPLICATED)}), donate_argnums=0)
  # One executable for both shard_maps, where the classic program (and the
  # pmap backend) dispatches its two pmaps one after the other: the same math,
  # and one program for the compare harness to count collectives in.
  return jax.jit(train_step, donate_argnums=0)
# endregion


def make_evaluate(config, placement):
  """The compiled `(state, batch) -> per-member and ensemble metric sums`.

  Returns `member_loss_sum` and `member_correct` (one per member), and the
  ensemble's `ensemble_correct`, `ensemble_probs` and the example `count`.
  """
  vmapped = config.member_loop == "vmap"

  def evaluate(state, batch):
    _, logits = _each_member(ensemble.loss_fn, (state.params,), batch,
                             vmapped=vmapped)
    probs = lax.pmean(jax.nn.softmax(logits).mean(0),
                      axis_name=devices.ENSEMBLE_AXIS)
    return {**_each_member(ensemble.member_sums, (logits,),
                           batch["targets"]),
            **ensemble.ensemble_sums(probs, batch["targets"])}

  out_specs = {"member_loss_sum": _MEMBERS, "member_correct": _MEMBERS,
               "ensemble_correct": _REPLICATED, "ensemble_probs": _REPLICATED,
               "count": _REPLICATED}
  return jax.jit(jax.shard_map(evaluate, mesh=placement,
                               in_specs=(_MEMBERS, _REPLICATED),
                               out_specs=out_specs))


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
