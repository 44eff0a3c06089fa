"""What a `Port` says about each of its runs beyond its step: how often the
step is called per optimiser step (`Port.calls_per_step`), how its state is
read and placed for comparison (`StateView`, `Port.state_views`); each
checked before anything traces. (The programs trained beside the proof are
`baseline`'s.)
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from compare._src.prove import adapt
from compare._src.prove import port_steps
from compare._src.prove.port_steps import PortError


@dataclasses.dataclass(frozen=True)
class StateView:
  """How one run's own state is compared with the others' (`Port.state_views`).

  Runs are compared leaf by leaf on one tree, the ground truth's; a run that
  holds its state otherwise (optax.MultiSteps' wrapper around the optimiser
  state and a step counter that counts calls, where the reference holds the
  plain state) gives its view of it. The lockstep checks read each run
  through its view, and place the truth's state back into the run's own
  layout through it, so every run takes its step from the one shared state.
  The same concept is meant for every state two sides hold differently: an
  ensemble's reference holding a tuple of member states against pmap's
  stacked members. (FSDP's pmap shards are `Port.pmap_specs`': the harness
  splits and joins them itself.)

  Attributes:
    compared: the run's own state -> the state compared, of the truth's
      kind (a flax struct train state, as the reference holds it). It only
      selects and rearranges leaves (it is applied to the state on the
      devices too), and must hold every leaf a mistake can reach.
    placed: `(compared state, the run's own initial state) -> the run's
      own state`: the inverse of `compared` at an optimiser-step boundary,
      the run's initial state bringing what the compared state leaves out
      (static fields, a zeroed accumulator, a call counter's start).
  """

  compared: Callable[[Any], Any]
  placed: Callable[[Any, Any], Any]


def check(port, names) -> None:
  """`calls_per_step` and `state_views` as described: keyed by the Port's
  run names (`names`), each value of its type."""
  for field, kind in (("calls_per_step", int), ("state_views", StateView)):
    value = getattr(port, field)
    if value is None:
      continue
    if not isinstance(value, dict):
      raise PortError(f"{field}: a dict by run name, got "
                      f"{type(value).__name__}")
    for name, given in value.items():
      if name not in names:
        raise PortError(f"{field}: {name!r} is none of the runs "
                        f"{', '.join(names)}")
      if not isinstance(given, kind) or isinstance(given, bool):
        raise PortError(f"{field}[{name!r}]: a {kind.__name__}, got "
                        f"{type(given).__name__}")
  for name, calls in (port.calls_per_step or {}).items():
    if calls < 1 or name in (port.baselines or {}):
      raise PortError(f"calls_per_step[{name!r}]: a positive count of "
                      f"calls, for a run that is no baseline, got {calls}")


# The view of a run that holds the truth's kind of state: itself.
AS_HELD = StateView(lambda state: state, lambda state, like: state)


def view(port, name: str, held: bool) -> StateView:
  """Run `name`'s view of its state as the harness holds it: the Port's
  own (or none), and for a held state (`adapt.HeldState`) the harness's
  own step counter read in optimiser steps (it counts the step's calls)."""
  given = (port.state_views or {}).get(name)
  calls = (port.calls_per_step or {}).get(name, 1)
  if not held:
    return given or AS_HELD
  inner = given or AS_HELD
  return StateView(
      compared=lambda state: state.replace(
          params=inner.compared(state.params), step=state.step // calls),
      placed=lambda state, like: like.replace(
          params=inner.placed(state.params, adapt.tree_of(like)),
          step=state.step * calls))


def check_views(port, state, port_state, reference_state,
                baseline_states) -> None:
  """Every run's initial host state (pmap's `state`, the ports'
  `port_state`, ...), read through its view (`view`), holds the leaves the
  truth's holds: the lockstep compares them leaf by leaf."""
  states = {"pmap": state, **{name: port_state for name in (
      port.port_name, *(port.extra_ports or {}))}, **baseline_states}
  truth = "pmap"
  if port.reference_step is not None:
    truth, states["reference"] = "reference", reference_state
  held = isinstance(state, adapt.HeldState)
  against = view(port, truth, held).compared(states[truth])
  for name, state in states.items():
    field = (f"state_views[{name!r}]" if name in (port.state_views or {})
             else "state_views")
    try:
      seen = jax.eval_shape(view(port, name, held).compared, state)
    except Exception as err:  # pylint: disable=broad-except
      raise PortError(f"{field}: reading run {name!r}'s state fails: "
                      f"{port_steps.one_line(err)}") from err
    problem = port_steps.tree_difference(
        seen, against, f"{field}: run {name!r}'s compared state",
        f"the truth's ({truth})")
    if problem:
      raise PortError(problem)

