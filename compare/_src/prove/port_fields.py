"""Each field of a `Port` checked on its own, before anything traces.

What a field must be (a callable, a mesh over every process's devices,
named extra ports, placeable specs, scalar metrics), each mistake one
`PortError` line naming the field; `port.check` then traces the steps
(`port_steps`).
"""

from collections.abc import Iterable

import jax
import numpy as np

from compare import conversions
from compare._src.prove import adapt
from compare._src.prove import baseline
from compare._src.prove import port_steps
from compare._src.prove import run_fields
from compare._src.prove.port_steps import PortError


def check_callables(port) -> None:
  if not isinstance(port.name, str) or not port.name:
    raise PortError(f"name: a non-empty string, got {port.name!r}")
  for field in ("pmap_step", "port_step"):
    if not callable(getattr(port, field)):
      raise PortError(f"{field} is not callable "
                      f"(got {type(getattr(port, field)).__name__})")
  for field in ("reference_step", "evaluate", "port_evaluate"):
    value = getattr(port, field)
    if value is not None and not callable(value):
      raise PortError(f"{field} is not callable (got "
                      f"{type(value).__name__}); leave it None or give a "
                      "function")
  if not isinstance(port.mesh, jax.sharding.Mesh):
    raise PortError(f"mesh: a jax.sharding.Mesh, got "
                    f"{type(port.mesh).__name__}")
  _extra_ports(port.extra_ports)
  if port.port_evaluate is not None and port.evaluate is None:
    raise PortError("port_evaluate: give evaluate too (pmap's side's "
                    "evaluation, which the port's is compared with)")
  _mesh_spans_processes(port.mesh)
  if not callable(port.batches) and not isinstance(port.batches, Iterable):
    raise PortError("batches: a function of the step or an iterable, got "
                    f"{type(port.batches).__name__}")
  if isinstance(port.steps, bool) or not isinstance(port.steps, int) \
      or port.steps < 1:
    raise PortError(f"steps: a positive integer, got {port.steps!r}")
  if hasattr(port.batches, "__len__") and len(port.batches) < port.steps:
    raise PortError(f"batches: {len(port.batches)} batches for "
                    f"{port.steps} steps")


def _mesh_spans_processes(mesh) -> None:
  """Every process holds some of the mesh's devices: pmap runs in each
  process over its own. Every process reads the same answer from the same
  global devices, so all of them refuse together (none waits on another
  in a collective)."""
  held = {d.process_index for d in mesh.devices.flat}
  missing = sorted(set(range(jax.process_count())) - held)
  if missing:
    raise PortError(
        f"mesh: its {mesh.size} devices are process(es) {sorted(held)}'s; "
        f"process(es) {missing} of {jax.process_count()} hold none: build it "
        f"over every process's devices (jax.devices() holds "
        f"{jax.device_count()}, {jax.local_device_count()} a process)")


# Run names the engine gives runs of its own (a Port's, the calibration's).
RESERVED_RUNS = ("pmap", "port", "reference", "calibration")


def _extra_ports(extra) -> None:
  if extra is None:
    return
  if not isinstance(extra, dict):
    raise PortError("extra_ports: a dict of run name -> step, got "
                    f"{type(extra).__name__}")
  for name, step in extra.items():
    if (not isinstance(name, str) or not name.isidentifier()
        or name.startswith(RESERVED_RUNS)):
      raise PortError(f"extra_ports: run name {name!r}: a Python identifier "
                      f"that does not start with {', '.join(RESERVED_RUNS)}")
    if not callable(step):
      raise PortError(f"extra_ports[{name!r}] is not callable (got "
                      f"{type(step).__name__})")


CALIBRATIONS = ("nudge", "row_order")


def run_names(port) -> tuple[str, ...]:
  """Every run a `Port` has, by name: pmap's, its ports', its baselines',
  the reference's."""
  return ("pmap", port.port_name, *(port.extra_ports or {}),
          *(port.baselines or {}),
          *(("reference",) if port.reference_step is not None else ()))


def check_runs(port) -> None:
  """`port_name`, `pairs`, `calibration`, `baselines` and the runs' own
  fields (`run_fields`) as described."""
  if port.port_name != "port" and (
      not isinstance(port.port_name, str) or not port.port_name.isidentifier()
      or port.port_name.startswith(RESERVED_RUNS)
      or port.port_name in (port.extra_ports or {})):
    raise PortError(f"port_name: a Python identifier that does not start "
                    f"with {', '.join(RESERVED_RUNS)} and names no extra "
                    f"port, got {port.port_name!r}")
  if port.calibration not in CALIBRATIONS:
    raise PortError(f"calibration: one of {', '.join(CALIBRATIONS)}, got "
                    f"{port.calibration!r}")
  baseline.check(port, RESERVED_RUNS)
  names = run_names(port)
  run_fields.check(port, names)
  if port.pairs is None:
    return
  for pair in port.pairs:
    if (not isinstance(pair, tuple) or len(pair) != 2 or pair[0] == pair[1]
        or not set(pair) <= set(names)):
      raise PortError(f"pairs: each a pair of two of the runs "
                      f"{', '.join(names)}, got {pair!r}")


def check_specs(port, port_state) -> None:
  """`port_specs` placeable: a prefix of the port's state, naming the
  mesh's axes, dividing each dimension it splits."""
  if port.port_specs is None:
    return
  try:
    conversions.abstract_on_mesh(port_state, port.mesh, port.port_specs)
  except (ValueError, TypeError) as err:
    raise PortError(f"port_specs: {port_steps.one_line(err)}") from err


def check_metrics(field, metrics) -> dict:
  if not isinstance(metrics, dict) or not all(
      np.ndim(v) == 0 for v in metrics.values()):
    raise PortError(f"{field} must return a dict of scalar metrics, got "
                    f"{type(metrics).__name__}")
  return metrics


def held_differently(port_state, state) -> str | None:
  """Where `port_init`'s state has `init`'s arrays but not its pytree (a
  train state on one side only, or leaves that are not arrays, such as an
  equinox BatchNorm's `axis_name`, of another shape), in words."""
  if isinstance(port_state, adapt.HeldState) != isinstance(
      state, adapt.HeldState):
    return ("port_init's state is a train state where init's is not (or the "
            "other way round): both sides hold the state the same way")
  if not isinstance(state, adapt.HeldState) or (
      jax.tree.structure(port_state) == jax.tree.structure(state)):
    return None
  return ("port_init's state has init's arrays but another pytree: its "
          "leaves that are not arrays (a string, a tuple of axis names, a "
          "bool) are not init's; both sides' programs must hold them alike")
