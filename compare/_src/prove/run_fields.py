"""What a `Port` says about each of its runs beyond its step: how often the
step is called per optimiser step (`Port.calls_per_step`), how its state is
read and placed for comparison (`StateView`, `Port.state_views`), and the
programs trained beside the proof for comparison (`Baseline`,
`Port.baselines`); each checked before anything traces.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from compare._src.prove import adapt
from compare._src.prove import port_steps
from compare._src.prove.port_steps import PortError

# The sides a baseline runs on: pmap's devices and layout, or the mesh's.
SIDES = ("pmap", "port")


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
  stacked members, FSDP's pmap shards against the whole parameters.

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


@dataclasses.dataclass(frozen=True)
class Baseline:
  """Another program trained beside the proof, for comparison only
  (`Port.baselines`): e.g. accumulation's plain data-parallel steps, which
  at one microbatch must equal its ports bitwise, and whose memory is the
  full-batch baseline.

  It trains from its own initial state on the same batches, one call per
  optimiser step, and is judged only in the `pairs` that name it: no
  negative control is planted in it, `--switch-at` leaves it running, and
  no port run is witnessed against it.

  Attributes:
    step: its step, `(state, batch) -> (state, metrics)`, as pmap's step
      takes them (`side="pmap"`) or as the port's (`side="port"`).
    side: `"pmap"` or `"port"`: whose devices, state layout and evaluation
      step (`Port.device_evaluation`) it uses.
    init: its initial host state (or a function returning it); `init` by
      default. Read through no `StateView`: it holds the truth's kind of
      state.
  """

  step: Callable
  side: str = "port"
  init: Any = None


def check(port, names) -> None:
  """`calls_per_step`, `state_views` and `baselines` as described: keyed by
  the Port's run names (`names`), each value of its type."""
  for field, kind in (("calls_per_step", int), ("state_views", StateView),
                      ("baselines", Baseline)):
    value = getattr(port, field)
    if value is None:
      continue
    if not isinstance(value, dict):
      raise PortError(f"{field}: a dict by run name, got "
                      f"{type(value).__name__}")
    for name, given in value.items():
      if field != "baselines" and name not in names:
        raise PortError(f"{field}: {name!r} is none of the runs "
                        f"{', '.join(names)}")
      if not isinstance(given, kind) or isinstance(given, bool):
        raise PortError(f"{field}[{name!r}]: a {kind.__name__}, got "
                        f"{type(given).__name__}")
  for name, calls in (port.calls_per_step or {}).items():
    if calls < 1 or name in (port.baselines or {}):
      raise PortError(f"calls_per_step[{name!r}]: a positive count of "
                      f"calls, for a run that is no baseline, got {calls}")
  for name, baseline in (port.baselines or {}).items():
    if baseline.side not in SIDES or not callable(baseline.step):
      raise PortError(f"baselines[{name!r}]: a callable step on side "
                      f"{' or '.join(SIDES)}, got side {baseline.side!r}")


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

