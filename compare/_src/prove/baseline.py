"""A run beside a `Port`'s that is no port of pmap's program: a `Baseline`.

FSDP is proved against pmap and the reference, and reported against data
parallelism's run on the same batches (its state replicated: the memory
target is per-device state against it). Such a run is a `Baseline`: it
trains from `init` on the same batches as every run, is judged in the
`Port`'s `pairs` where named, and is neither planted by a negative control
nor taken for a port (a port's rounding flip is excused by pmap's step,
never by a baseline's).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

from compare import conversions
from compare._src.prove import port_fields
from compare._src.prove import port_steps
from compare._src.prove.port_steps import PortError


@dataclasses.dataclass(frozen=True)
class Baseline:
  """A run of another program on the `Port`'s mesh (`Port.baselines`).

  Attributes:
    step: `(state, batch) -> (state, metrics)`, as `port_step` is: the
      state on the mesh as `specs` places it, the batch split over it by
      rows, pmap's metrics.
    specs: how its state lies on the mesh, in `Port.port_specs`' language
      (None: replicated).
    evaluation_step: its test evaluation on the devices, `(state, batch) ->
      sums` as `DeviceEvaluation.port_step`, where the `Port` has a
      `device_evaluation` (else the `Port`'s `evaluate` serves it).
  """

  step: Callable
  specs: Any = None
  evaluation_step: Callable | None = None


def check(port) -> None:
  """`port.baselines` as described, each mistake one `PortError` line
  naming the field (the steps are traced with the ports'):
  a dict of run name -> `Baseline`, names no other run has."""
  if port.baselines is None:
    return
  if not isinstance(port.baselines, dict):
    raise PortError("baselines: a dict of run name -> compare.Baseline, got "
                    f"{type(port.baselines).__name__}")
  for name, baseline in port.baselines.items():
    field = f"baselines[{name!r}]"
    if (not isinstance(name, str) or not name.isidentifier()
        or name.startswith(port_fields.RESERVED_RUNS)
        or name in (port.port_name, *(port.extra_ports or {}))):
      raise PortError(f"baselines: run name {name!r}: a Python identifier "
                      "that names no port and does not start with "
                      f"{', '.join(port_fields.RESERVED_RUNS)}")
    if not isinstance(baseline, Baseline):
      raise PortError(f"{field}: a compare.Baseline, got "
                      f"{type(baseline).__name__}")
    if not callable(baseline.step):
      raise PortError(f"{field}.step is not callable")
    if (port.device_evaluation is not None) != callable(
        baseline.evaluation_step):
      raise PortError(f"{field}.evaluation_step: a callable exactly where "
                      "the Port has a device_evaluation (each run evaluates "
                      "its own state)")


def steps(port) -> dict:
  """`{run name: step}` of `port`'s baselines."""
  return {name: b.step for name, b in (port.baselines or {}).items()}


def check_specs(port, state) -> None:
  """Each baseline's `specs` placeable on `state` (`port_fields.check_specs`'
  rules)."""
  for name, baseline in (port.baselines or {}).items():
    try:
      conversions.abstract_on_mesh(state, port.mesh, baseline.specs)
    except (ValueError, TypeError) as err:
      raise PortError(f"baselines[{name!r}].specs: "
                      f"{port_steps.one_line(err)}") from err
