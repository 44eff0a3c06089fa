"""Known mistakes planted in a port, so that users see the verdict fail.

`python -m compare --strategy S --negative-control NAME` runs the port's
runs with one of these and must exit 1. Each takes a strategy module and
returns a stand-in with the same API and one function changed: the backends
themselves never carry a bug.
"""

import contextlib
import dataclasses
import types

import jax
import jax.numpy as jnp

from training import protocol

_API = protocol.API


def _with(module, **changed):
  """`module`'s strategy API with some functions replaced."""
  return types.SimpleNamespace(
      **{**{name: getattr(module, name) for name in _API}, **changed})


def learning_rate_1pct(module, run):
  """The port's learning rate x 1.01: the first-step check catches it."""
  del run

  def create_state(seed, config, placement):
    config = dataclasses.replace(config,
                                 learning_rate=config.learning_rate * 1.01)
    return module.create_state(seed, config, placement)

  return _with(module, create_state=create_state)


@contextlib.contextmanager
def _patched(owner, name, value):
  original = getattr(owner, name)
  setattr(owner, name, value)
  try:
    yield
  finally:
    setattr(owner, name, original)


def gradient_trap(module, run):
  """The literal port: `check_vma=True` and a pmean of the gradients.

  With check_vma=True the gradient of a replicated parameter is already
  summed over the mesh axis, so the port's pmean leaves it N times too large.
  """
  del run
  shard_map = jax.shard_map

  def checked(f, **kwargs):
    return shard_map(f, **{**kwargs, "check_vma": True})

  def make_train_step(config, placement, variant):
    with _patched(jax, "shard_map", checked):
      return module.make_train_step(config, placement, variant)

  return _with(module, make_train_step=make_train_step)


def no_pmean(module, run):
  """Each device keeps its own gradient: `lax.pmean` dropped from the step.

  pmean is looked up when the step is traced, so the step is traced (and
  every later call made) with pmean replaced by the identity.
  """
  del run

  def make_train_step(config, placement, variant):
    step = module.make_train_step(config, placement, variant)

    def train_step(state, batch):
      with _patched(jax.lax, "pmean", lambda x, axis_name, **_: x):
        return step(state, batch)

    return train_step

  return _with(module, make_train_step=make_train_step)


def members_mixed(module, run):
  """Each member starts from its neighbour's initial state (members rolled)."""
  del run

  def create_state(seed, config, placement):
    state = module.create_state(seed, config, placement)
    roll = jax.jit(lambda s: jax.tree.map(lambda x: jnp.roll(x, 1, 0), s),
                   out_shardings=jax.tree.map(lambda x: x.sharding, state))
    return roll(state)

  return _with(module, create_state=create_state)
