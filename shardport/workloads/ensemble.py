"""One ensemble member's program: its init, loss and metrics (the HOWTO's).

Every backend runs these same functions per member; what differs is where the
members live and how their probabilities are averaged into the ensemble's.
"""

import functools

import flax.training.train_state
import jax
import jax.numpy as jnp
import optax

from shardport.workloads import cnn
from shardport.workloads import configs
from shardport.workloads import member_conv

_CNN = cnn.CNN()
# How the CNN's convolution of activations meets `jax.vmap` over the members
# in the members-stacked jit ports: "grouped" (lax's own, a grouped
# convolution the partitioner gathers whole), "einsum" (a batched matmul
# over shifted windows, split over the member axis but rounded otherwise) or
# "member" (`member_conv`: batch-grouped, split over the member axis, each
# device's convolution the one member's).
HIDDEN_CONVS = ("grouped", "einsum", "member")


def stacked_cnn(hidden_conv: str, batch_shards: int = 1) -> cnn.CNN:
  """The CNN for a members-stacked jit port (`HIDDEN_CONVS`), each member's
  batch split over `batch_shards` devices."""
  convs = {"grouped": None, "einsum": cnn.shifted_window_conv,
           "member": functools.partial(member_conv.conv,
                                       batch_shards=batch_shards)}
  return cnn.CNN(hidden_conv=convs[hidden_conv])


def check_members(members: int, n_devices: int,
                  per_device: int | None = None) -> None:
  """Raises EnsembleSizeError unless `members` lay out on `n_devices`.

  Args:
    members: the ensemble size.
    n_devices: the devices the members spread over.
    per_device: the members each device takes where the backend fixes it
      (pmap maps one per device); None for any positive multiple.
  """
  if per_device is not None and members != per_device * n_devices:
    each = "one member" if per_device == 1 else f"{per_device} members"
    raise configs.EnsembleSizeError(
        f"the pmap ensemble runs exactly {each} per device: "
        f"asked for {members} members on {n_devices} devices (use --members "
        f"{per_device * n_devices}, or the sharded port, which takes any "
        "multiple of the device count)")
  if members < 1 or members % n_devices:
    raise configs.EnsembleSizeError(
        f"the sharded ensemble needs a positive multiple of the device count "
        f"({n_devices}) members, got {members}")


def mesh_shape(members: int, n_devices: int) -> tuple[int, int]:
  """`(M, D)`: the `members` x `data` mesh of `members` on `n_devices`.

  Member m trains on row m; its batch splits over the row's D devices.

  Raises:
    DeviceError: more members than devices (or none): no mesh shape fits.
    EnsembleSizeError: members that do not divide the devices.
  """
  if not 1 <= members <= n_devices:
    raise configs.DeviceError(
        f"--members {members} does not fit {n_devices} devices: the members "
        f"x data mesh has one row per member, at most {n_devices} rows")
  if n_devices % members:
    fits = ", ".join(str(m) for m in range(1, n_devices + 1)
                     if n_devices % m == 0)
    raise configs.EnsembleSizeError(
        f"--members {members} does not divide the {n_devices} devices into "
        f"rows of the members x data mesh (choose one of {fits})")
  return members, n_devices // members


def member_keys(seed: int, members: int) -> jax.Array:
  """One init key per member, `[members]`, the same for every backend."""
  return jax.random.split(jax.random.key(seed), members)


def create_train_state(rng, learning_rate, momentum, input_shape):
  """One member's initial `TrainState` (the HOWTO's `create_train_state`)."""
  params = _CNN.init(rng, jnp.ones((1, *input_shape)))["params"]
  tx = optax.sgd(learning_rate, momentum)
  return flax.training.train_state.TrainState.create(
      apply_fn=_CNN.apply, params=params, tx=tx)


def loss_fn(params, batch):
  """Mean softmax cross entropy of one member, with its logits as aux."""
  logits = _CNN.apply({"params": params}, batch["inputs"])
  return cnn.cross_entropy_mean(logits, batch["targets"]), logits


def _by_slot(fn, members, shared, member_shards):
  """`fn(members, shared)`, vmapped, one member a device at a time.

  With `member_shards` devices holding several members each, slot j is
  every device's j-th member. Vmapped over all of a device's members at
  once, XLA batches their convolutions and matmuls, whose sums round
  otherwise than one member's program (2.4e-7 of the loss on one device);
  one slot at a time, behind an optimisation barrier as in the shard_map
  port (`sharded.ensemble._each_member`), each device runs one member's.
  """
  size = jax.tree.leaves(members)[0].shape[0]
  slots = size // (member_shards or size)
  if slots == 1:
    return fn(members, shared)
  split = jax.tree.map(
      lambda x: x.reshape(member_shards, slots, *x.shape[1:]), members)
  outs = [fn(*jax.lax.optimization_barrier(
      (jax.tree.map(lambda x, j=j: x[:, j], split), shared)))
          for j in range(slots)]
  return jax.tree.map(
      lambda *xs: jnp.stack(xs, 1).reshape(size, *xs[0].shape[1:]), *outs)


def stacked_train_step(state, batch, hidden_conv="grouped", batch_shards=1,
                       member_shards=None):
  """Every member's step at once, the members stacked on a leading axis
  (`jax.vmap`): the members-stacked `jit` ports' program.

  Args:
    state: the members' train states, stacked.
    batch: the batch every member trains on.
    hidden_conv: one of `HIDDEN_CONVS`, how the CNN's hidden convolution
      meets the members' vmap.
    batch_shards: the devices each member's batch is split over.
    member_shards: the devices the members are split over, or None for one
      member a device; with fewer devices than members each device takes
      its members one at a time (`_by_slot`).

  Returns:
    `(state, {"member_loss", "accuracy"})`, the accuracy the ensemble's.
  """
  model = stacked_cnn(hidden_conv, batch_shards)

  def member_loss_fn(params, batch):
    logits = model.apply({"params": params}, batch["inputs"])
    return cnn.cross_entropy_mean(logits, batch["targets"]), logits

  members_grads = jax.vmap(jax.value_and_grad(member_loss_fn, has_aux=True),
                           in_axes=(0, None))
  (loss, logits), grads = _by_slot(members_grads, state.params, batch,
                                   member_shards)
  state = jax.vmap(lambda member, g: member.apply_gradients(grads=g))(
      state, grads)
  probs = jax.nn.softmax(logits).mean(0)
  return state, {"member_loss": loss,
                 "accuracy": accuracy(probs, batch["targets"])}


def accuracy(probs_BK, labels_B):
  """Fraction of argmax predictions equal to the labels."""
  return jnp.mean(jnp.argmax(probs_BK, -1) == labels_B)


def member_sums(logits_BK, labels_B):
  """One member's summed loss and correct count."""
  return {"member_loss_sum": cnn.cross_entropy_sum(logits_BK, labels_B),
          "member_correct": cnn.correct_count(logits_BK, labels_B)}


def ensemble_sums(probs_BK, labels_B):
  """The ensemble's correct count, its probabilities and the example count."""
  return {"ensemble_correct": cnn.correct_count(probs_BK, labels_B),
          "ensemble_probs": probs_BK,
          "count": jnp.asarray(labels_B.shape[0])}
