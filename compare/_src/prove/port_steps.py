"""A `Port`'s steps traced on abstract values: every mistake one line.

Nothing compiles here: `jax.eval_shape` runs each step on the initial
state's shapes and the first batch's, and each mistake (a leaf missing, a
dtype or shape changed, a static field replaced, a metric pmap reports and
the port does not) is a `PortError` naming the field and the leaf.
"""

import itertools
from typing import Any

import jax
import numpy as np

from compare._src.prove import adapt
from compare._src.prove import pmap_shards
from compare import conversions


class PortError(ValueError):
  """A `Port` that cannot be proved as described (one line, names the leaf)."""


def one_line(err) -> str:
  """`err` in one line: its type and first line, and the next where the
  first only announces it (jax's pytree errors put the key path there:
  `different types at key path` / `    state.opt_state`)."""
  lines = [line.strip() for line in str(err).strip().splitlines()
           if line.strip()]
  first = lines[0] if lines else ""
  if len(lines) > 1 and (first.endswith(":") or first.endswith("key path")):
    first = f"{first} {lines[1]}"
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
  """A scalar loss, or no metrics at all (a step that returns its state
  alone, as JAX's SPMD MNIST example does: the state is what is judged)."""
  metrics = adapt.metrics_dict(metrics)
  if not metrics:
    return
  loss = metrics.get("loss")
  if loss is None or tuple(np.shape(loss)) not in shapes:
    raise PortError(f"{what} must return (state, metrics) with a scalar "
                    "loss (metrics['loss'], the metrics themselves, or the "
                    "first of a tuple)"
                    + (" per device" if () not in shapes else ""))


def _same_metrics(got, want, what: str, against: str) -> str | None:
  if want is None:  # pmap's step not traced (`_trace_pmap`)
    return None
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


def _trace_pmap(port: Any, state, batch, split=None, field="pmap_step",
                step=None):
  """pmap's step (or `step`, a pmap-side baseline's, named `field`) traced
  on the state as it takes it: stacked (in pieces where `split`,
  `pmap_shards.axes`, says so), or else broadcast. Returns `(state,
  metrics, layout)`: its state without a device axis, each leaf whole; its
  metrics, None where not traced; pmap's layout."""
  step = port.pmap_step if step is None else step
  # Each process's pmap maps over its own devices, on its rows.
  n = sum(d.process_index == jax.process_index()
          for d in port.mesh.devices.flat)
  rows = len(jax.tree.leaves(batch)[0]) // jax.process_count()
  mine = jax.tree.map(lambda x: x[jax.process_index() * rows:][:rows], batch)
  batch_split = _abstract(conversions.split_batch(mine, n))
  if split is not None and jax.process_count() > 1:
    # Its step splits and gathers over every process's devices, which no
    # one process can trace: the state's shapes stand for its output, and
    # the step is checked as it runs.
    return _abstract(state), None, STACKED
  if split is not None:  # held in pieces: stacked, and only so
    out, metrics = _trace(field, step, pmap_shards.abstract(
        state, split, n, n), batch_split)
    out = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                       out)
    return pmap_shards.whole(out, split, n), metrics, STACKED
  stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      (n, *np.shape(x)), np.asarray(x).dtype), state)
  try:
    out, metrics = _trace(field, step, stacked, batch_split)
    out = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                       out)
    return out, metrics, STACKED
  except PortError as stacked_error:
    try:
      out, metrics = _trace(field, step, _abstract(state), batch_split)
    except PortError:
      raise stacked_error from None
    if tree_difference(out, state, "", "") is not None:
      raise PortError(f"{field} takes the state broadcast (in_axes=None) "
                      "but returns it stacked: give it out_axes=None for "
                      "the state, as flax's examples do") from None
    return out, metrics, BROADCAST


def check_steps(port: Any, state, batch, port_state=None, split=None,
                reference_state=None) -> str:
  """Traces every step on abstract values: each must return the state's
  tree (leaves, shapes, dtypes), a scalar loss and pmap's metrics; the
  port's and the reference's steps on their own initial states
  (`port_state`, `reference_state`), where they have them; pmap's on its
  pieces where `split` (`pmap_shards.axes`) says so. The baselines are
  `check_baselines`'.

  Returns:
    pmap's layout of the state, `STACKED` or `BROADCAST`.
  """
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top
  n = sum(d.process_index == jax.process_index()
          for d in port.mesh.devices.flat)
  pmap_state, pmap_metrics, layout = _trace_pmap(port, state, batch, split)
  if pmap_metrics is not None:
    _check_loss(pmap_metrics, "pmap_step", ((n,), ()))
  problem = tree_difference(pmap_state, state, "pmap_step's state",
                            "the initial state")
  port_state = state if port_state is None else port_state
  on_mesh = conversions.abstract_on_mesh(port_state, port.mesh,
                                         port.port_specs)
  rows = NamedSharding(port.mesh, P(port.mesh.axis_names))
  ports = {"port_step": port.port_step,
           **{f"extra_ports[{name!r}]": step
              for name, step in (port.extra_ports or {}).items()}}
  for field, step in ports.items():
    port_out, metrics = _trace(field, step, on_mesh, _abstract(batch, rows))
    _check_loss(metrics, field, ((),))
    problem = problem or tree_difference(port_out, pmap_state,
                                         f"{field}'s state", "pmap_step's")
    problem = problem or _static_difference(port_out, port_state, field)
    problem = problem or _same_metrics(metrics, pmap_metrics, field,
                                       "pmap_step")
  if port.reference_step is not None and not problem:
    reference_state = state if reference_state is None else reference_state
    ref_state, metrics = _trace("reference_step", port.reference_step,
                                _abstract(reference_state), _abstract(batch))
    _check_loss(metrics, "reference_step", ((),))
    problem = tree_difference(ref_state, reference_state,
                              "reference_step's state", "its initial state")
    problem = problem or _same_metrics(metrics, pmap_metrics,
                                       "reference_step", "pmap_step")
  if problem:
    raise PortError(problem)
  return layout


def check_baselines(port: Any, states: dict, batch) -> dict:
  """Traces each of `port.baselines` on its side, from its initial state
  (`states`; on the port's side placed by its `specs`): it must return
  that state's tree, static fields included, and a scalar loss.

  Returns:
    `{name: pmap's layout of its state}` for the pmap-side ones.
  """
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top
  n = sum(d.process_index == jax.process_index()
          for d in port.mesh.devices.flat)
  layouts = {}
  for name, baseline in (port.baselines or {}).items():
    field, state = f"baselines[{name!r}]", states[name]
    if baseline.side == "pmap":
      out, metrics, layouts[name] = _trace_pmap(
          port, state, batch, field=field, step=baseline.step)
      _check_loss(metrics, field, ((n,), ()))
    else:
      rows = NamedSharding(port.mesh, P(port.mesh.axis_names))
      out, metrics = _trace(field, baseline.step, conversions.abstract_on_mesh(
          state, port.mesh, baseline.specs), _abstract(batch, rows))
      _check_loss(metrics, field, ((),))
    problem = (tree_difference(out, state, f"{field}'s state",
                               "its initial state")
               or _static_difference(out, state, field))
    if problem:
      raise PortError(problem)
  return layouts


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
                    f"{one_line(err)}") from err
  if not isinstance(out, tuple) or len(out) != 2:
    raise PortError(f"{field} must return (state, metrics)")
  return out


