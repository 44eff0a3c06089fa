"""A run's state placed from the host, and what a run keeps of its initial
state to place it (`compare._src.prove.lockstep`)."""

import jax

from compare._src.prove import host_copies

# Leaves up to this size are kept whole in a run's `initial`: step counters,
# keys, a MultiSteps gradient step; `from_host` reads their values.
SKELETON_MAX_SIZE = 64


def skeleton(state):
  """What `from_host` takes of a run's initial state (`like`): its static
  fields, its small leaves (copied: the step may donate them) and each large
  leaf's shape, dtype and sharding, not a copy of the devices' state."""
  def leaf(x):
    if not isinstance(x, jax.Array):
      return x
    if x.size > SKELETON_MAX_SIZE:
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    return x.copy()
  return jax.tree.map(leaf, state)


def place(run, host, step: int):
  """The host state `host` (after `step` optimiser steps) as `run`'s train
  state: the run places its own view (`to_host`) itself (`from_host`: our
  programs through their checkpoint layout, a `Port`'s runs every leaf as
  the program holds it). The compiled step is specialised to the state's
  pytree metadata (the optimiser object): the run's own, with the placed
  leaves."""
  state = run.module.from_host(host_copies.read(host), run.placement,
                               run.initial, step, run.calls)
  return jax.tree.unflatten(jax.tree.structure(run.state),
                            jax.tree.leaves(state))
