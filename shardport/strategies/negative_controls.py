"""Known mistakes planted in a port, so that users see the verdict fail.

`python -m compare --strategy S --negative-control NAME` runs the port's
runs with one of these and must exit 1. Each takes a strategy module and
returns a stand-in with the same API and one function changed: the backends
themselves never carry a bug.
"""

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from shardport.strategies import protocol
from shardport.workloads import configs

_API = protocol.API


@dataclasses.dataclass(frozen=True)
class NegativeControl:
  """A known mistake `--negative-control NAME` plants in the port's runs.

  Attributes:
    name: the flag's value.
    mistake: what goes wrong, in one line.
    plant: `(module, run name) -> module` with the mistake in it.
    at_step: for a mistake that starts at a step, `N -> plant` (the flag
      is then `NAME:N`); None otherwise.
    step: the step it starts at, once chosen.
  """

  name: str
  mistake: str
  plant: Callable[[Any, str], Any] | None
  at_step: Callable[[int], Callable[[Any, str], Any]] | None = None
  step: int | None = None


def chosen(controls, name: str, program: str) -> NegativeControl:
  """The control of `controls` called `name` (`NAME:N` for one that starts
  at optimiser step N), for `program`'s `--negative-control`.

  Raises:
    ConfigError: no such control, or a step given where none is taken (or
      none where one is).
  """
  base, colon, step = name.partition(":")
  for control in controls:
    if control.name != base:
      continue
    if control.at_step is None and not colon:
      return control
    if control.at_step is not None and step.isdigit() and int(step) >= 1:
      return dataclasses.replace(control, name=name, step=int(step),
                                 plant=control.at_step(int(step)))
    raise configs.ConfigError(
        f"--negative-control {base} takes "
        + (f"a step: {base}:N with N >= 1" if control.at_step else
           "no step") + f", got {name!r}")
  raise configs.ConfigError(
      f"unknown --negative-control {name!r} for {program}; choose one of "
      f"{', '.join(c.name for c in controls)}")


class _Planted:
  """`module` with some functions replaced and every other attribute its
  own: a run's optional members (`from_host`, a `Port` run's `host_view`,
  which reads the state on the devices instead of copying it to the host)
  stay what they were, so a planted run is read as the unplanted one is."""

  def __init__(self, module, changed):
    self._module, self._changed = module, changed

  def __getattr__(self, name):
    if name in self._changed:
      return self._changed[name]
    return getattr(self._module, name)


def _with(module, **changed):
  """`module`'s strategy API with some functions replaced."""
  unknown = set(changed) - set(_API)
  if unknown:  # a plant changes only what every run has
    raise TypeError(f"not a strategy API function: {sorted(unknown)}")
  return _Planted(module, changed)


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


def pmean_over(right: str, wrong: str):
  """A plant: every `lax.pmean` over mesh axis `right` in the port's step
  taken over `wrong` instead (a collective over the wrong axis of a 2-D
  mesh). Where the step holds no such pmean (a `jit` port: the compiler
  places its collectives) it changes nothing.

  pmean is looked up when the step is traced, as for `no_pmean`.
  """
  def plant(module, run):
    del run
    pmean = jax.lax.pmean

    def moved(x, axis_name, **kwargs):
      return pmean(x, wrong if axis_name == right else axis_name, **kwargs)

    def make_train_step(config, placement, variant):
      step = module.make_train_step(config, placement, variant)

      def train_step(state, batch):
        with _patched(jax.lax, "pmean", moved):
          return step(state, batch)

      return train_step

    return _with(module, make_train_step=make_train_step)

  return plant


def _evaluation_scaled(module, which):
  """`module` whose evaluation's metrics `which(name)` picks are x 1.01."""

  def make_evaluate(config, placement):
    evaluate = module.make_evaluate(config, placement)

    def wrong(state, batch):
      sums = evaluate(state, batch)
      return {k: v * 1.01 if which(k) else v for k, v in sums.items()}

    return wrong

  return _with(module, make_evaluate=make_evaluate)


def evaluation_1pct(module, run):
  """The port's evaluation sums its test loss 1% high (a mean taken over
  the wrong count): the states stay right, only the end-of-run check of
  one shared state evaluated by each run sees it."""
  del run
  return _evaluation_scaled(module, lambda name: "loss" in name)


def evaluation_1pct_all(module, run):
  """As `evaluation_1pct`, every metric (a team's evaluation names its
  metrics as it likes: none may be called a loss)."""
  del run
  return _evaluation_scaled(module, lambda name: True)


def members_mixed(module, run):
  """Each member starts from its neighbour's initial state (members rolled)."""
  del run

  def create_state(seed, config, placement):
    state = module.create_state(seed, config, placement)
    roll = jax.jit(lambda s: jax.tree.map(lambda x: jnp.roll(x, 1, 0), s),
                   out_shardings=jax.tree.map(lambda x: x.sharding, state))
    return roll(state)

  return _with(module, create_state=create_state)


def _optimizer_step_about_to_run(state) -> int:
  """The optimiser step a call of the train step on `state` belongs to.

  Under optax.MultiSteps an optimiser step is K calls and its counter is the
  optimiser state's; otherwise the train state's own step. Read from one
  addressable copy: replicated, per device or per member, they agree.
  """
  def first(x):
    return int(np.asarray(x.addressable_shards[0].data).max())
  opt_state = state.opt_state
  if isinstance(opt_state, optax.MultiStepsState):
    return first(opt_state.gradient_step) + 1
  return first(state.step) + 1


def _update_scaler(factor, member):
  """`(before, after) -> params` with `after - before` scaled by `factor`,
  only for ensemble member `member` where it is not None; compiled once
  per layout, keeping every leaf's sharding. Only floating leaves are
  scaled: a team's state may hold counters among its params (optax's
  `count`, NNX's `step`), and a counter x 1.01 turns float, which fails
  the check by its dtype and not by the 1% it exists to plant."""
  compiled = {}

  def scale(before, after):
    shardings = jax.tree.map(lambda x: x.sharding, after)
    key = (jax.tree.structure(after), tuple(jax.tree.leaves(shardings)))
    if key not in compiled:
      def scaled(b, a):
        def leaf(x, y):
          if not jnp.issubdtype(y.dtype, jnp.floating):
            return y
          weight = factor
          if member is not None:
            rows = jnp.arange(y.shape[0]) == member
            weight = jnp.where(rows, factor, 1.0).reshape(
                (-1,) + (1,) * (y.ndim - 1))
          return x + weight * (y - x)
        return jax.tree.map(leaf, b, a)
      compiled[key] = jax.jit(scaled, out_shardings=shardings)
    return compiled[key](before, after)

  return scale


def scaled_update(first_step: int, last_step: int | None,
                  factor: float = 1.01, member: int | None = None):
  """A plant: the port's update x `factor` at optimiser steps `first_step`
  to `last_step` (None: to the end); in ensemble member `member` only where
  it is given.

  What a wrongly ported schedule, warm-up or branch does when it first acts
  late: the steps before are right, so only a check that holds at every
  step can see it.
  """
  def plant(module, run):
    del run

    def make_train_step(config, placement, variant):
      step = module.make_train_step(config, placement, variant)
      scale = _update_scaler(factor, member)

      def train_step(state, batch):
        n = _optimizer_step_about_to_run(state)
        if n < first_step or (last_step is not None and n > last_step):
          return step(state, batch)
        # The step may donate its input: keep the params it starts from.
        before = jax.tree.map(lambda x: x.copy(), state.params)
        state, metrics = step(state, batch)
        return state.replace(params=scale(before, state.params)), metrics

      return train_step

    return _with(module, make_train_step=make_train_step)

  return plant


def scaled_gradient(first_step: int, factor: float = 1.002):
  """A plant: every `lax.pmean` in the port's step (the gradients', and the
  reported loss's) x `factor` from optimiser step `first_step` on.

  A gradient off by 0.2% moves the momentum trace by 0.2% of the gradient:
  a fifth of the 1% controls, the smallest late mistake the lockstep check
  is measured against. Where the step holds no pmean (a `jit` port) it
  changes nothing. Two steps are built, the planted one traced under the
  patch, so that jit's cache never hands one the other's program.
  """
  def plant(module, run):
    del run
    pmean = jax.lax.pmean

    def scaled(x, axis_name, **kwargs):
      return jax.tree.map(lambda y: y * factor,
                          pmean(x, axis_name, **kwargs))

    def make_train_step(config, placement, variant):
      right = module.make_train_step(config, placement, variant)
      wrong = module.make_train_step(config, placement, variant)

      def train_step(state, batch):
        if _optimizer_step_about_to_run(state) < first_step:
          return right(state, batch)
        with _patched(jax.lax, "pmean", scaled):
          return wrong(state, batch)

      return train_step

    return _with(module, make_train_step=make_train_step)

  return plant


def late_controls(member: int | None = None) -> tuple:
  """The controls that start at a chosen step N (`NAME:N`): the port's
  update 1% off from step N on, and at step N only."""
  where = "" if member is None else f" of member {member}"
  return (
      NegativeControl(
          "update-1pct-from", f"the port's update{where} x 1.01 from step N "
          "on (a schedule or warm-up ported wrongly)", None,
          at_step=lambda n: scaled_update(n, None, member=member)),
      NegativeControl(
          "update-1pct-at", f"the port's update{where} x 1.01 at step N "
          "only (a branch taken once, ported wrongly)", None,
          at_step=lambda n: scaled_update(n, n, member=member)))
