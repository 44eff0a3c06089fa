"""A run beside a `Port`'s that is no port of pmap's program: a `Baseline`.

FSDP is reported against data parallelism's run on the same batches (its
state replicated: the memory target is per-device state against it);
accumulation against the plain data-parallel steps, on pmap's side and on
the port's, which at one microbatch must equal its runs bitwise. Such a
run is a `Baseline`: it trains from its own initial state on the same
batches as every run, one call per optimiser step, is judged in the
`Port`'s `pairs` where named, and is neither planted by a negative control,
switched by `--switch-at`, nor taken for a port (a port's rounding flip is
excused by pmap's step, never by a baseline's).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

from compare import conversions
from compare._src.prove import port_steps
from compare._src.prove.port_steps import PortError

# The sides a baseline runs on: pmap's devices and layout, or the mesh's.
SIDES = ("pmap", "port")


@dataclasses.dataclass(frozen=True)
class Baseline:
  """Another program trained beside the proof, for comparison only
  (`Port.baselines`). Each strategy gives only what its program needs.

  Attributes:
    step: its step, `(state, batch) -> (state, metrics)`, as pmap's step
      takes them (`side="pmap"`) or as the port's (`side="port"`: the
      state on the mesh as `specs` places it, the batch split by rows).
    side: `"pmap"` or `"port"`: whose devices, state layout and (without
      `evaluation_step`) evaluation step (`Port.device_evaluation`) it
      uses.
    init: its initial host state (or a function returning it); the
      Port's `init` by default. Read through no `StateView`: it holds the
      truth's kind of state.
    specs: on the port's side, how its state lies on the mesh, in
      `Port.port_specs`' language (None: replicated).
    evaluation_step: on the port's side, its own test evaluation on the
      devices, `(state, batch) -> sums` as `DeviceEvaluation.port_step`,
      where the Port has a `device_evaluation` and its port's step cannot
      read this state (FSDP's evaluates split parameters); else the side's.
  """

  step: Callable
  side: str = "port"
  init: Any = None
  specs: Any = None
  evaluation_step: Callable | None = None


def check(port, reserved: tuple[str, ...]) -> None:
  """`port.baselines` as described, each mistake one `PortError` line
  naming the field (the steps are traced later, `port_steps`): a dict of
  run name -> `Baseline`, names no other run has and none starting with
  `reserved`, each on a side with what that side can use."""
  if port.baselines is None:
    return
  if not isinstance(port.baselines, dict):
    raise PortError("baselines: a dict of run name -> compare.Baseline, got "
                    f"{type(port.baselines).__name__}")
  for name, baseline in port.baselines.items():
    field = f"baselines[{name!r}]"
    if (not isinstance(name, str) or not name.isidentifier()
        or name.startswith(reserved)
        or name in (port.port_name, *(port.extra_ports or {}))):
      raise PortError(f"baselines: run name {name!r}: a Python identifier "
                      "that names no port and does not start with "
                      f"{', '.join(reserved)}")
    if not isinstance(baseline, Baseline):
      raise PortError(f"{field}: a compare.Baseline, got "
                      f"{type(baseline).__name__}")
    if baseline.side not in SIDES or not callable(baseline.step):
      raise PortError(f"{field}: a callable step on side "
                      f"{' or '.join(SIDES)}, got side {baseline.side!r}")
    if baseline.side == "pmap" and (baseline.specs is not None or
                                    baseline.evaluation_step is not None):
      raise PortError(f"{field}: specs and evaluation_step are the port "
                      "side's; a pmap-side baseline takes pmap's")
    if baseline.evaluation_step is not None and (
        port.device_evaluation is None
        or not callable(baseline.evaluation_step)):
      raise PortError(f"{field}.evaluation_step: a callable, and only where "
                      "the Port has a device_evaluation")


def check_specs(port, states: dict) -> None:
  """Each port-side baseline's `specs` placeable on its initial state
  (`states`, by name; `port_fields.check_specs`' rules)."""
  for name, baseline in (port.baselines or {}).items():
    try:
      conversions.abstract_on_mesh(states[name], port.mesh, baseline.specs)
    except (ValueError, TypeError) as err:
      raise PortError(f"baselines[{name!r}].specs: "
                      f"{port_steps.one_line(err)}") from err
