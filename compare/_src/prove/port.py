"""A team's own program and its port, described once: the `Port`.

`compare.prove(port)` proves it as it proves our strategies (the same runs,
checks, calibration, controls and report). Everything a `Port` can get wrong
is checked first, by tracing the steps on abstract values (nothing
compiles): each mistake is one `PortError` line naming the field and the
leaf.
"""

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from typing import Any

import jax

from compare._src.prove import adapt
from compare._src.prove import baseline
from compare._src.prove import device_evaluation
from compare._src.prove import pmap_shards
from compare._src.prove import port_fields
from compare._src.prove import port_steps
from compare._src.prove import run_fields
from compare._src.prove.batches import Batches
from compare._src.prove.port_steps import PortError


@dataclasses.dataclass(frozen=True)
class Port:
  """A team's pmap program and its port, for `compare.prove`.

  Attributes:
    name: what the report calls the program.
    init: the initial state on the host, or a function of no arguments that
      returns it: the state as the program holds it. A flax struct train
      state (e.g. a `TrainState`, with `params`, `opt_state` and `step`)
      is run as it is; any other pytree (the pmap tutorial's `Params`
      NamedTuple, an optax `(params, opt_state)` tuple, a dict) is held
      with a step counter the harness keeps itself, and the report names
      its leaves under `params`.
    pmap_step: the classic step as written, `jax.pmap`'d: `(state, batch)
      -> (state, metrics)`, the batch as `[devices, rows per device, ...]`
      and the state either stacked (a copy per device, `in_axes=0`) or
      broadcast (the new style, `in_axes=None` with `out_axes=None` for
      the state, as flax's examples write it today): the harness finds
      which by tracing the step. `metrics` are a scalar loss, a tuple (the
      loss first) or a dict with a `loss`, per device or not, or none at all
      (`compare.adapt_step` of a step returning its state alone: the state
      is judged). A step of another signature plugs in through
      `compare.adapt_step`.
    port_step: its port, `(state, batch) -> (state, metrics)`, taking the
      state replicated on `mesh` and the batch split over it by rows; it
      reports the metrics pmap's step reports, and every one of them is
      judged at every step.
    mesh: the port's mesh; pmap runs on the same devices, in its order.
    batches: the global host batches (pytrees of numpy arrays, rows
      leading): a function of the 0-based step, or an iterable.
    steps: optimiser steps to train (`prove(steps=...)` overrides it; `init`
      is not built again, so a schedule made for `steps` keeps its length).
    reference_step: optional one-device ground truth, `(state, global
      batch) -> (state, metrics)`; without it pmap is the ground truth.
    evaluate: optional test metrics of a host state (the program's own
      state), `state -> {name: float}`; at the end each run's final-state
      evaluation is compared on one shared state.
    port_evaluate: optional: the port's own evaluation, where it has one
      apart from pmap's (an eval step ported with the train step): the
      same signature and metrics as `evaluate`, which it needs. At the end
      pmap's side evaluates the shared final state with `evaluate` and the
      port's side with `port_evaluate`, and every metric must agree to
      rounding, so a mistake in the port's evaluation fails the proof.
      Without it `evaluate` serves both sides.
    extra_ports: optional: more ports of the same program, by run name
      (`{"jit": jit_step}` beside a shard_map `port_step`): each is a run
      of its own, from the same state on the same batches, proved against
      pmap (and the reference) as `port_step` is, and a negative control
      is planted in every port.
    port_specs: optional: how the port's state lies on `mesh`, a
      `PartitionSpec` or a pytree of them whose structure is the state's
      or a prefix of it (FSDP: each parameter split over the mesh; an
      ensemble: members over it). The ports take and return their state so
      placed. Without it the state is replicated (`P()`).
    port_init: optional: the port's own initial state (or a function
      returning it), where the port builds its own (its `TrainState` with
      its own `tx` and schedule): its leaves must be those of `init`'s, and
      the port's steps run on it, so its optimiser is what is proved.
      Without it both sides start from `init`.
    port_name: the run name of `port_step` in the report (`"shard_map"`
      beside an extra `"jit"` port); `"port"` by default.
    pairs: optional: the pairs of runs judged, `(a, b)` with `b` the nearer
      the truth, by run name (`"pmap"`, `port_name`, each of
      `extra_ports`, `"reference"`). Without it every port is judged
      against pmap and against the reference, and pmap against the
      reference.
    calibration: how the calibration runs and the lockstep's one-step
      band change the truth's training: `"nudge"` (every float of each
      batch moved one ulp, rows in place: safe where a row's place picks
      its dropout mask or its device) or `"row_order"` (each batch's rows
      reordered, within each device's slice or across the batch: for a
      program whose step sums over rows and nothing else).
    device_evaluation: optional, instead of `evaluate`: a test evaluation
      each side runs on its own devices (`compare.DeviceEvaluation`: a
      test batch, pmap's and the port's evaluation steps and how their
      sums are summarised); each run evaluates its state in its own layout
      during training and at the end, and the end-of-run check evaluates
      one shared state with each side's step.
    pmap_specs: optional: pmap's state held as per-device shards (FSDP's
      classic program: each device one piece of a leaf, pmap taking the
      pieces stacked), in `port_specs`' language: an axis that names the
      mesh's axes is split over pmap's devices, one piece per device in
      the mesh's order; a leaf without one is a copy per device. The
      harness splits the state so for pmap's step and joins the pieces to
      compare whole leaves. Without it pmap's state is whole on every
      device (stacked or broadcast).
    calls_per_step: optional: `{run name: calls}`, calls of that run's
      step per optimiser step, all on the same batch (K under
      optax.MultiSteps, each call taking one microbatch); 1 for a run not
      named.
    state_views: optional: `{run name: compare.StateView}`, how a run that
      holds its state otherwise than the truth (MultiSteps' wrapper) is
      read for comparison and placed from the truth's state.
    reference_init: optional: the reference's own initial state (or a
      function returning it), where it holds the state otherwise than
      pmap (plain where pmap's is MultiSteps-wrapped); `init` by default.
    baselines: optional: `{run name: compare.Baseline}`, other programs
      trained beside on the same batches (FSDP's replicated data-parallel
      run, whose memory it is reported against; accumulation's plain
      data-parallel steps on each side), each from its own initial state
      on its side's devices, judged only in the `pairs` that name them,
      and no port: no negative control is planted in it.

  A state's leaves that are not arrays (an equinox module's strings, bools
  and callables) are held apart and joined again for each call of a step,
  as `eqx.partition(model, eqx.is_array)` does; only its arrays are placed
  and compared.
  """

  name: str
  init: Any
  pmap_step: Callable
  port_step: Callable
  mesh: jax.sharding.Mesh
  batches: Callable[[int], Any] | Iterable[Any]
  steps: int
  reference_step: Callable | None = None
  evaluate: Callable[[Any], dict] | None = None
  port_init: Any = None
  port_evaluate: Callable[[Any], dict] | None = None
  extra_ports: dict[str, Callable] | None = None
  port_specs: Any = None
  port_name: str = "port"
  pairs: tuple[tuple[str, str], ...] | None = None
  calibration: str = "nudge"
  device_evaluation: Any = None
  pmap_specs: Any = None
  calls_per_step: dict[str, int] | None = None
  state_views: dict[str, Any] | None = None
  reference_init: Any = None
  baselines: dict[str, Any] | None = None


def initial_state(port: Port, field: str = "init", given=None):
  """The port's initial host state (`field`: `init`, or a run's own:
  `port_init`, `reference_init`, a baseline's `given` init): a flax struct
  train state as it is, any other pytree (a NamedTuple, a tuple of params
  and optimiser state, a dict, an equinox model) held with the harness's
  own step counter (`adapt.HeldState`).

  Returns:
    `(state, rest)`: the host state, and the leaves that are not arrays
    (`adapt.partition`; None where every leaf is one).
  """
  given = getattr(port, field) if given is None else given
  state = _called(field, given) if callable(given) else given
  leaves = jax.tree_util.tree_leaves_with_path(state)
  if not any(adapt.is_array(x) for _, x in leaves):
    raise PortError(f"{field}: the state holds no arrays (got "
                    f"{type(state).__name__})")
  rest = None
  if not adapt.is_train_state(state):
    if not all(adapt.is_array(x) for _, x in leaves):
      rest = adapt.partition(state)[1]
    state = adapt.hold(state)
  else:
    for path, x in leaves:
      if not adapt.is_array(x):
        raise PortError(
            f"{field}: leaf {jax.tree_util.keystr(path)} of the train state "
            f"is a {type(x).__name__}, not an array: make it a static field "
            "(flax.struct.field(pytree_node=False))")
  # Python scalars (TrainState.create's step) as the arrays jax makes of
  # them (int32 unless x64): the dtypes the steps return.
  return adapt.to_numpy(state), rest


def in_harness_shape(port: Port, state, rest=None, port_rest=None) -> Port:
  """`port` with its steps (and `evaluate`) taking the state the harness
  holds: a held state's run the team's own on its tree, its leaves that
  are not arrays (`rest`, the port's own `port_rest`) joined again. A
  train state's are left as written (their metrics become a dict as they
  are read)."""
  if not isinstance(state, adapt.HeldState):
    return port
  rests = {"pmap_step": rest, "port_step": port_rest,
           "reference_step": rest}
  steps = {f: adapt.held_step(getattr(port, f), compiled=f != "pmap_step",
                              rest=rests[f])
           for f in ("pmap_step", "port_step", "reference_step")
           if getattr(port, f) is not None}
  if port.extra_ports:
    steps["extra_ports"] = {
        name: adapt.held_step(step, compiled=True, rest=port_rest)
        for name, step in port.extra_ports.items()}
  if port.baselines:  # each holds init's kind of state
    steps["baselines"] = {name: dataclasses.replace(
        baseline, step=adapt.held_step(
            baseline.step, compiled=baseline.side != "pmap", rest=rest))
                          for name, baseline in port.baselines.items()}
  for field in ("port_specs", "pmap_specs"):  # the team's tree: held params
    if getattr(port, field) is not None:
      steps[field] = adapt.HeldState(params=getattr(port, field), opt_state=(),
                                     step=jax.sharding.PartitionSpec())
  evaluations = {field: _held_evaluation(getattr(port, field), given_rest)
                 for field, given_rest in (("evaluate", rest),
                                           ("port_evaluate", port_rest))}
  return dataclasses.replace(port, **evaluations, **steps)


def _held_evaluation(evaluate, rest):
  """`evaluate` of a held state: the team's own on its tree, the leaves
  that are not arrays (`rest`) joined again (None stays None)."""
  if evaluate is None:
    return None

  def held_evaluate(held):
    tree = adapt.tree_of(held)
    return evaluate(tree if rest is None else adapt.combine(tree, rest))

  return held_evaluate


def _called(field, function, *args):
  """`function(*args)`, the team's own code: an exception it raises is one
  `PortError` line naming the field (the original chained as its cause)."""
  try:
    return function(*args)
  except PortError:
    raise
  except Exception as err:  # pylint: disable=broad-except
    raise PortError(f"{field} raised {port_steps.one_line(err)}") from err


@dataclasses.dataclass(frozen=True)
class Checked:
  """A `Port` checked and in the harness's shape.

  Attributes:
    port: the port, its steps taking the state the harness holds.
    state: the initial host state (a train state, or `adapt.HeldState`).
    batches: its `Batches`.
    rows: the global batch's rows.
    pmap_layout: how pmap's step takes the state: `STACKED` or
      `BROADCAST`.
    port_state: the port's own initial host state (`port_init`), else
      `state`.
    pmap_split: each leaf's axis split over pmap's devices (`pmap_specs`,
      `pmap_shards.axes`), or None where pmap holds whole leaves.
    reference_state: the reference's (`reference_init`), else `state`.
    baseline_states: `{baseline: its initial host state}`.
    baseline_layouts: `{pmap-side baseline: its layout, as pmap_layout}`.
  """

  port: Port
  state: Any
  batches: Batches
  rows: int
  pmap_layout: str
  port_state: Any = None
  pmap_split: list | None = None
  reference_state: Any = None
  baseline_states: dict = dataclasses.field(default_factory=dict)
  baseline_layouts: dict = dataclasses.field(default_factory=dict)


def _own_states(port: Port, state) -> dict:
  """The reference's and each baseline's initial host state, `state`
  where it has none of its own."""
  return dict(
      reference_state=state if port.reference_init is None else
      initial_state(port, "reference_init")[0],
      baseline_states={
          name: state if baseline.init is None else initial_state(
              port, f"baselines[{name!r}].init", baseline.init)[0]
          for name, baseline in (port.baselines or {}).items()})


def check(port: Port) -> Checked:
  """Every check of a `Port`, before anything compiles."""
  if not isinstance(port, Port):
    raise PortError(f"expected a compare.Port, got {type(port).__name__}")
  port_fields.check_callables(port)
  port_fields.check_runs(port)
  device_evaluation.check(port)
  state, rest = initial_state(port)
  port_state, port_rest = state, rest
  if port.port_init is not None:
    port_state, port_rest = initial_state(port, "port_init")
    problem = (port_steps.tree_difference(port_state, state, "port_init's "
                                          "state", "init's")
               or port_fields.held_differently(port_state, state))
    if problem:
      raise PortError(problem)
  port = in_harness_shape(port, state, rest, port_rest)
  own = _own_states(port, state)
  port_fields.check_specs(port, port_state)
  baseline.check_specs(port, own["baseline_states"])
  try:
    split = pmap_shards.axes(port, state)
  except ValueError as err:
    raise PortError(f"pmap_specs: {err}") from err
  batches = Batches(port.batches)
  batch = _called("batches", batches, 0)
  rows = port_steps.check_batch(batch, port.mesh.size)
  layout = port_steps.check_steps(port, state, batch, port_state, split,
                                  own["reference_state"])
  layouts = port_steps.check_baselines(port, own["baseline_states"], batch)
  run_fields.check_views(port, state, port_state, **own)
  if port.evaluate is not None:
    metrics = port_fields.check_metrics("evaluate",
                             _called("evaluate", port.evaluate, state))
  if port.port_evaluate is not None:
    ported = port_fields.check_metrics("port_evaluate", _called(
        "port_evaluate", port.port_evaluate, port_state))
    if set(ported) != set(metrics):
      raise PortError(f"port_evaluate returns {sorted(ported)} where "
                      f"evaluate returns {sorted(metrics)}: the same metrics")
  return Checked(port, state, batches, rows, layout, port_state, split,
                 **own, baseline_layouts=layouts)


def planted(checked: Checked, port: Port) -> Checked:
  """`checked`, running `port`'s steps, evaluations and own initial state:
  the same program with a negative control's mistake in its ports, checked
  as the unplanted one was (a mistake that starts at a step reads the
  state's values, which tracing on abstract ones cannot give it)."""
  state, rest = initial_state(port)
  port_state, port_rest = state, rest
  if port.port_init is not None:
    port_state, port_rest = initial_state(port, "port_init")
  port = in_harness_shape(port, state, rest, port_rest)
  return dataclasses.replace(checked, port=port, port_state=port_state,
                             **_own_states(port, state))


def load(spec: str) -> Port:
  """The `Port` named by `PKG.MODULE:NAME` (`python -m compare --program`):
  NAME is a `Port`, or a function of no arguments that returns one."""
  module_name, colon, name = spec.partition(":")
  if not colon or not module_name or not name:
    raise PortError(f"--program takes PKG.MODULE:NAME, got {spec!r}")
  try:
    module = importlib.import_module(module_name)
  except Exception as err:  # pylint: disable=broad-except
    raise PortError(f"--program {spec}: cannot import {module_name} "
                    f"({port_steps.one_line(err)})") from err
  if not hasattr(module, name):
    raise PortError(f"--program {spec}: {module_name} has no {name}")
  found = getattr(module, name)
  if callable(found) and not isinstance(found, Port):
    found = _called(f"--program {spec}: {name}()", found)
  if not isinstance(found, Port):
    raise PortError(f"--program {spec}: {name} is a "
                    f"{type(found).__name__}, not a compare.Port (or a "
                    "function returning one)")
  return found
