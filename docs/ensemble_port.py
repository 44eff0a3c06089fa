"""An ensemble's members' states and their step, pmap before, port after.

The region `ensemble-members` is what docs/MORE-IDIOMS.md shows: the
members' `TrainState`s created with one key each and stacked, a member per
device under pmap, and the port's `shard_map` over a member-sharded mesh
axis that steps each device's own member (the `jit(vmap)` that gathers
them instead: docs/MIGRATION.md 2.6). tests/test_snippets.py runs it as
pasted and then its entry in tests/snippet_calls.py: both from the same
members on 8 emulated devices, every leaf and loss bitwise.
"""
# The region's imports are its own (the page's import block has no optax).
# pylint: disable=g-import-not-at-top,wrong-import-position

import jax
from jax.sharding import PartitionSpec as P


# region: ensemble-members
import flax.linen as nn
import optax
from flax.training import train_state

class Member(nn.Module):  # every member the same model, its own weights
  @nn.compact
  def __call__(self, x):
    return nn.Dense(10)(nn.relu(nn.Dense(32)(x)))

def member_states(key, members, x):  # stacked: every leaf [members, ...]
  def create(k):  # one member's state from its own key
    params = Member().init(k, x)["params"]
    return train_state.TrainState.create(
        apply_fn=Member().apply, params=params, tx=optax.sgd(0.1, 0.9))
  return jax.vmap(create)(jax.random.split(key, members))

def member_step(state, x, y):  # one member's step on the whole batch
  def loss_fn(params):
    logits = state.apply_fn({"params": params}, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  return state.apply_gradients(grads=grads), loss  # no collective

def ensemble_steps(mesh):  # pmap: a member per device; the port: the same
  pmapped = jax.pmap(member_step, "ensemble", in_axes=(0, None, None))
  def own_member(state, x, y):  # the device's block [1, ...]: its member
    state, loss = member_step(jax.tree.map(lambda a: a[0], state), x, y)
    return jax.tree.map(lambda a: a[None], (state, loss))
  port = jax.jit(jax.shard_map(  # states placed once: P("ensemble")
      own_member, mesh=mesh, in_specs=(P("ensemble"), P(), P()),
      out_specs=P("ensemble")))
  return pmapped, port
# endregion

