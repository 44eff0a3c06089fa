"""What every strategy is made of, with real defaults: the `Strategy` class.

A strategy (data_parallel, ensemble, accumulation, ...) is a training
program (`training.programs`: its config, validation, calls per step,
evaluation and summary) plus what `compare` needs to judge it: its runs and
the pairs it compares, its tolerances with their reasons, its negative
controls, its report lines and its plot. Subclasses override only what
differs from these defaults.
"""

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from compare import plots
from compare.tolerances import Tolerance
from training.programs import Program
from workloads import configs


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run a strategy asks for: its name in the report, its module and
  variant (`compare.runner.Run` is the run as it trains)."""

  name: str
  module: Any
  variant: str


@dataclasses.dataclass(frozen=True)
class NegativeControl:
  """A known mistake `--negative-control NAME` plants in the port's runs.

  Attributes:
    name: the flag's value.
    mistake: what goes wrong, in one line.
    plant: `(module, run name) -> module` with the mistake in it.
  """

  name: str
  mistake: str
  plant: Callable[[Any, str], Any]


# Every pair outside the bitwise ones passes when its drift stays within
# this multiple of the calibration band at every step. Chosen from the long
# runs in docs/measured/verdicts.json (`bench/verdict_runs.py`, quoted in the
# guide's section 4): correct ports track the band or stay below it, while
# every planted mistake drifts far above it.
CALIBRATION_MULTIPLE = 3.0


class Strategy(Program):
  """One program compared across backends; subclass and fill in.

  The program's own attributes (name, config, validation) are `Program`'s.

  Attributes:
    runs: every run, the reference last.
    pairs: `(a, b)` pairs compared, `b` taken as ground truth.
    tolerances: `{"first_step", "final"}` tolerances with their reasons.
    calibration_multiple: how far above the calibration curve a non-bitwise
      pair may drift (see `CALIBRATION_MULTIPLE`).
    negative_controls: the mistakes `--negative-control` can plant.
    port_runs: the runs a negative control plants its mistake in.
    loss_convention: what the reported losses are, in one sentence.
  """

  runs: ClassVar[tuple[RunSpec, ...]] = ()
  pairs: ClassVar[tuple[tuple[str, str], ...]] = ()
  tolerances: ClassVar[dict[str, Tolerance]] = {}
  calibration_multiple: ClassVar[float] = CALIBRATION_MULTIPLE
  calibration_reason: ClassVar[str] = (
      "correct ports track the band or stay below it at every step, from 20 "
      "to 1000 steps and on random labels; every planted mistake drifts far "
      "above it (docs/measured/verdicts.json, quoted in section 4)")
  negative_controls: ClassVar[tuple[NegativeControl, ...]] = ()
  port_runs: ClassVar[tuple[str, ...]] = ("shard_map", "jit")
  loss_convention: ClassVar[str] = (
      "train loss as the classic program reports it: the cross entropy "
      "summed over each device's batch, averaged over devices (sum / "
      "n_devices), so it grows with the per-device batch; test loss is the "
      "mean per example")

  # --- what runs -----------------------------------------------------------

  def active_runs(self, config, n_devices: int) -> tuple[str, ...]:
    """The runs that can run with this config on `n_devices` devices."""
    del config, n_devices
    return tuple(run.name for run in self.runs)

  def why_skipped(self, config, n_devices: int) -> str:
    """Why the runs left out by `active_runs` did not run."""
    del config, n_devices
    return ""

  def control(self, name: str) -> NegativeControl:
    """The negative control called `name`."""
    for control in self.negative_controls:
      if control.name == name:
        return control
    raise configs.ConfigError(
        f"unknown --negative-control {name!r} for {self.name}; choose one of "
        f"{', '.join(c.name for c in self.negative_controls)}")

  # --- what it reports ---------------------------------------------------

  def report_fields(self, config) -> dict:
    """Fields added to the JSON's top level."""
    del config
    return {}

  def run_fields(self, config, name: str) -> dict:
    """Fields added to one run's entry in the JSON."""
    del config, name
    return {}

  def report_lines(self, report: dict) -> list[str]:
    """Lines of the printed report that only this strategy has."""
    del report
    return []

  def plot(self, report: dict, path: str) -> None:
    """`--plot PATH`: loss, test accuracy and drift against the band."""
    plots.learning_curves(report, path)
