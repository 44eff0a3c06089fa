"""A team's own program and its port, described once: the `Port`.

`compare.prove(port)` proves it as it proves our strategies (the same runs,
checks, calibration, controls and report). Everything a `Port` can get wrong
is checked first, by tracing the steps on abstract values (nothing
compiles): each mistake is one `PortError` line naming the field and the
leaf.
"""

import dataclasses
import importlib
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

from compare import adapt
from compare import conversions


class PortError(ValueError):
  """A `Port` that cannot be proved as described (one line, names the leaf)."""


@dataclasses.dataclass(frozen=True)
class Port:
  """A team's pmap program and its port, for `compare.prove`.

  Attributes:
    name: what the report calls the program.
    init: the initial state on the host, or a function of no arguments that
      returns it: a flax struct train state (e.g. a subclass of
      `flax.training.train_state.TrainState`) with `params`, `opt_state` and
      `step`, and any other field it carries (`batch_stats`, a PRNG key).
    pmap_step: the classic step as written, `jax.pmap`'d: `(state, batch)
      -> (state, metrics)` with the state replicated (one copy per device,
      stacked) and the batch as `[devices, rows per device, ...]`. `metrics`
      holds a scalar `loss` per device.
    port_step: its port, `(state, batch) -> (state, metrics)`, taking the
      state replicated on `mesh` and the batch split over it by rows.
    mesh: the port's mesh; pmap runs on the same devices, in its order.
    batches: the global host batches (pytrees of numpy arrays, rows
      leading): a function of the 0-based step, or an iterable.
    steps: optimiser steps to train (`prove(steps=...)` overrides it; `init`
      is not built again, so a schedule made for `steps` keeps its length).
    reference_step: optional one-device ground truth, `(state, global
      batch) -> (state, metrics)`; without it pmap is the ground truth.
    evaluate: optional test metrics of a host state, `state -> {name:
      float}`; the free-running verdict judges them (else the train loss).
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


class Batches:
  """A `Port`'s batches by step, whichever way it gives them.

  An iterable is read once, in order; the first few batches are kept for
  the timing windows.
  """

  KEPT = 4

  def __init__(self, batches):
    self._call = batches if callable(batches) else None
    self._iter = None if self._call else iter(batches)
    self._kept = []

  def __call__(self, step: int):
    if self._call:
      return self._call(step)
    if step < len(self._kept):
      return self._kept[step]
    batch = next(self._iter, None)
    if batch is None:
      raise PortError(f"batches: ran out at step {step + 1}")
    if len(self._kept) < self.KEPT:
      self._kept.append(batch)
    return batch

  def first(self, count: int):
    """The first `count` batches, or as many as an iterable holds (already
    read ones are kept): a port of fewer steps times on fewer batches."""
    if self._call:
      return [self._call(i) for i in range(count)]
    out = []
    for i in range(count):
      try:
        out.append(self(i))
      except PortError:  # an iterable of fewer batches: all it had
        break
    return out


def initial_state(port: Port):
  """The port's initial host state: a flax struct train state as it is,
  any other pytree (a NamedTuple, a tuple of params and optimiser state, a
  dict) held with the harness's own step counter (`adapt.HeldState`)."""
  state = _called("init", port.init) if callable(port.init) else port.init
  if not jax.tree.leaves(state):
    raise PortError(f"init: the state holds no arrays (got "
                    f"{type(state).__name__})")
  if not adapt.is_train_state(state):
    state = adapt.hold(state)
  # Python scalars (TrainState.create's step) as the arrays jax makes of
  # them (int32 unless x64): the dtypes the steps return.
  return adapt.to_numpy(state)


def in_harness_shape(port: Port, state) -> Port:
  """`port` with its steps (and `evaluate`) taking the state the harness
  holds: a held state's run the team's own on its tree. A train state's
  are left as written (their metrics become a dict as they are read)."""
  if not isinstance(state, adapt.HeldState):
    return port
  steps = {f: adapt.held_step(getattr(port, f), compiled=f != "pmap_step")
           for f in ("pmap_step", "port_step", "reference_step")
           if getattr(port, f) is not None}
  evaluate = port.evaluate
  if evaluate is not None:
    evaluate = lambda held: port.evaluate(adapt.tree_of(held))  # pylint: disable=unnecessary-lambda-assignment
  return dataclasses.replace(port, evaluate=evaluate, **steps)


def _called(field, function, *args):
  """`function(*args)`, the team's own code: an exception it raises is one
  `PortError` line naming the field (the original chained as its cause)."""
  try:
    return function(*args)
  except PortError:
    raise
  except Exception as err:  # pylint: disable=broad-except
    raise PortError(f"{field} raised {_one_line(err)}") from err


def _one_line(err) -> str:
  first = str(err).strip().splitlines()[0] if str(err).strip() else ""
  return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _leaves(tree):
  return {jax.tree_util.keystr(path): (np.shape(x), np.dtype(x.dtype))
          for path, x in jax.tree_util.tree_leaves_with_path(tree)}


def tree_difference(got, want, what: str, against: str) -> str | None:
  """The first leaf where `got` differs from `want` in presence, shape or
  dtype, in words; None where they match."""
  got, want = _leaves(got), _leaves(want)
  for path in itertools.chain(want, got):
    if path not in got:
      return f"{what} has no leaf {path or 'at the root'} ({against} has one)"
    if path not in want:
      return f"{what} has a leaf {path} that {against} has not"
    if got[path] != want[path]:
      (gs, gd), (ws, wd) = got[path], want[path]
      return (f"{what} differs at {path}: {gd}{list(gs)} where {against} "
              f"has {wd}{list(ws)}")
  return None


def _check_callables(port: Port) -> None:
  if not isinstance(port.name, str) or not port.name:
    raise PortError(f"name: a non-empty string, got {port.name!r}")
  for field in ("pmap_step", "port_step"):
    if not callable(getattr(port, field)):
      raise PortError(f"{field} is not callable "
                      f"(got {type(getattr(port, field)).__name__})")
  for field in ("reference_step", "evaluate"):
    value = getattr(port, field)
    if value is not None and not callable(value):
      raise PortError(f"{field} is not callable (got "
                      f"{type(value).__name__}); leave it None or give a "
                      "function")
  if not isinstance(port.mesh, jax.sharding.Mesh):
    raise PortError(f"mesh: a jax.sharding.Mesh, got "
                    f"{type(port.mesh).__name__}")
  if not callable(port.batches) and not isinstance(port.batches, Iterable):
    raise PortError("batches: a function of the step or an iterable, got "
                    f"{type(port.batches).__name__}")
  if isinstance(port.steps, bool) or not isinstance(port.steps, int) \
      or port.steps < 1:
    raise PortError(f"steps: a positive integer, got {port.steps!r}")
  if hasattr(port.batches, "__len__") and len(port.batches) < port.steps:
    raise PortError(f"batches: {len(port.batches)} batches for "
                    f"{port.steps} steps")


def check_batch(batch, n_devices: int) -> int:
  """The batch's row count, checked to split over `n_devices`."""
  leaves = jax.tree_util.tree_leaves_with_path(batch)
  if not leaves:
    raise PortError("batches: the first batch has no arrays")
  rows = {jax.tree_util.keystr(p): np.shape(x)[0] if np.ndim(x) else None
          for p, x in leaves}
  first_path, first = next(iter(rows.items()))
  for path, count in rows.items():
    if count is None:
      raise PortError(f"batches: leaf {path} is a scalar; every leaf needs "
                      "rows leading")
    if count != first:
      raise PortError(f"batches: leaf {path} has {count} rows where "
                      f"{first_path} has {first}")
  if first % n_devices:
    raise PortError(f"batches: {first} rows do not split over "
                    f"{n_devices} devices")
  return first


def _abstract(tree, sharding=None):
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      np.shape(x), np.asarray(x).dtype, sharding=sharding), tree)


def _check_loss(metrics, what: str, shapes: tuple) -> None:
  loss = adapt.metrics_dict(metrics).get("loss")
  if loss is None or tuple(np.shape(loss)) not in shapes:
    raise PortError(f"{what} must return (state, metrics) with a scalar "
                    "loss (metrics['loss'], the metrics themselves, or the "
                    "first of a tuple)"
                    + (" per device" if () not in shapes else ""))


def _same_metrics(got, want, what: str, against: str) -> str | None:
  got = sorted(adapt.metrics_dict(got))
  want = sorted(adapt.metrics_dict(want))
  if got == want:
    return None
  return (f"{what} reports metrics {got} where {against} reports {want}: "
          "every metric is judged at every step")


# pmap's two layouts of the state: the classic copy per device, stacked on
# a leading axis (`in_axes=0`), or broadcast to every device as one array
# (the new style's `in_axes=None, out_axes=None`).
STACKED, BROADCAST = "stacked", "broadcast"


def _trace_pmap(port: Port, state, batch):
  """pmap's step traced on the state as it takes it: stacked, or else
  broadcast. Returns `(its state without a device axis, its metrics,
  layout)`."""
  n = port.mesh.size
  split = _abstract(conversions.split_batch(batch, n))
  stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      (n, *np.shape(x)), np.asarray(x).dtype), state)
  try:
    out, metrics = _trace("pmap_step", port.pmap_step, stacked, split)
    out = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                       out)
    return out, metrics, STACKED
  except PortError as stacked_error:
    try:
      out, metrics = _trace("pmap_step", port.pmap_step, _abstract(state),
                            split)
    except PortError:
      raise stacked_error from None
    if tree_difference(out, state, "", "") is not None:
      raise PortError("pmap_step takes the state broadcast (in_axes=None) "
                      "but returns it stacked: give it out_axes=None for "
                      "the state, as flax's examples do") from None
    return out, metrics, BROADCAST


def check_steps(port: Port, state, batch) -> str:
  """Traces every step on abstract values: each must return the state's
  tree (leaves, shapes, dtypes), a scalar loss and pmap's metrics.

  Returns:
    pmap's layout of the state, `STACKED` or `BROADCAST`.
  """
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top
  n = port.mesh.size
  pmap_state, pmap_metrics, layout = _trace_pmap(port, state, batch)
  _check_loss(pmap_metrics, "pmap_step", ((n,), ()))
  problem = tree_difference(pmap_state, state, "pmap_step's state",
                            "the initial state")
  on_mesh = _abstract(state, NamedSharding(port.mesh, P()))
  rows = NamedSharding(port.mesh, P(port.mesh.axis_names))
  port_state, metrics = _trace("port_step", port.port_step, on_mesh,
                               _abstract(batch, rows))
  _check_loss(metrics, "port_step", ((),))
  problem = problem or tree_difference(port_state, pmap_state,
                                       "port_step's state", "pmap_step's")
  problem = problem or _static_difference(port_state, state, "port_step")
  problem = problem or _same_metrics(metrics, pmap_metrics, "port_step",
                                     "pmap_step")
  if port.reference_step is not None and not problem:
    ref_state, metrics = _trace("reference_step", port.reference_step,
                                _abstract(state), _abstract(batch))
    _check_loss(metrics, "reference_step", ((),))
    problem = tree_difference(ref_state, state, "reference_step's state",
                              "the initial state")
    problem = problem or _same_metrics(metrics, pmap_metrics,
                                       "reference_step", "pmap_step")
  if problem:
    raise PortError(problem)
  return layout


def _static_difference(got, want, field: str) -> str | None:
  """Where a step's state keeps its leaves but not its pytree (a static
  field such as `tx` or `apply_fn` replaced), in words; the compiled steps
  would refuse it later with jit's pytree-mismatch error."""
  if jax.tree.structure(got) == jax.tree.structure(want):
    return None
  return (f"{field}'s state has the leaves of the initial state but "
          "another pytree (a static field, such as tx or apply_fn, "
          "differs): return state.replace(...) of the state it was given")


def _trace(field, step, state, batch):
  try:
    out = jax.eval_shape(step, state, batch)
  except Exception as err:  # pylint: disable=broad-except
    raise PortError(f"{field} fails on the initial state and first batch: "
                    f"{_one_line(err)}") from err
  if not isinstance(out, tuple) or len(out) != 2:
    raise PortError(f"{field} must return (state, metrics)")
  return out


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
  """

  port: Port
  state: Any
  batches: Batches
  rows: int
  pmap_layout: str


def check(port: Port) -> Checked:
  """Every check of a `Port`, before anything compiles."""
  if not isinstance(port, Port):
    raise PortError(f"expected a compare.Port, got {type(port).__name__}")
  _check_callables(port)
  state = initial_state(port)
  port = in_harness_shape(port, state)
  batches = Batches(port.batches)
  batch = _called("batches", batches, 0)
  rows = check_batch(batch, port.mesh.size)
  layout = check_steps(port, state, batch)
  if port.evaluate is not None:
    _check_metrics(_called("evaluate", port.evaluate, state))
  return Checked(port, state, batches, rows, layout)


def _check_metrics(metrics) -> None:
  if not isinstance(metrics, dict) or not all(
      np.ndim(v) == 0 for v in metrics.values()):
    raise PortError("evaluate must return a dict of scalar metrics, got "
                    f"{type(metrics).__name__}")


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
                    f"({_one_line(err)})") from err
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
