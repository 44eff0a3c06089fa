"""What every strategy is made of, with real defaults: the `Strategy` class.

A strategy (data_parallel, ensemble, accumulation, ...) is a training
program (`shardport.strategies.program`: its config, validation, calls per
step, evaluation and summary) plus what `compare` needs to judge it: its runs
and the pairs it compares, its tolerances with their reasons and its negative
controls, and what it prints beyond the proof (read by the CLI alone: the
engine proves a `Plan`). Subclasses override only what differs from these defaults. What
every strategy trains, times and calibrates on is the same for all of them,
and `compare` plans it (`compare._src.prove.strategy_plan`).
"""

import dataclasses
import importlib
from typing import Any, ClassVar

from shardport.strategies import negative_controls
from shardport.strategies.negative_controls import NegativeControl
from shardport.strategies.program import Program
from shardport.strategies.tolerances import Tolerance


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run a strategy asks for: its name in the report, its program and
  variant (`compare._src.prove.runner.Run` is the run as it trains).

  Attributes:
    name: the run's name in the report.
    source: the backend module that runs it, by name (`"sharded.data_parallel"`:
      imported when first asked for, since the backends sit above the
      strategies), or an object with the backends' API (a reference).
    variant: the backend's variant (`"shard_map"`, `"jit"`, ...).
  """

  name: str
  source: Any
  variant: str

  @property
  def module(self):
    """The program with the backends' API (`shardport.strategies.protocol`)."""
    if isinstance(self.source, str):
      return importlib.import_module(self.source)
    return self.source


class Strategy(Program):
  """One program compared across backends; subclass and fill in.

  The program's own attributes (name, config, validation) are `Program`'s.

  Attributes:
    runs: every run, the reference last.
    pairs: `(a, b)` pairs compared, `b` taken as ground truth.
    tolerances: `{"first_step", "final"}` tolerances with their reasons.
    negative_controls: the mistakes `--negative-control` can plant.
    port_runs: the runs a negative control plants its mistake in.
    truth: the run taken as ground truth: the lockstep checks share its
      state, and the calibration runs are it, changed.
    witness: the run every port run must take the same step as for a
      pair of two programs to be excused a rounding flip (the pmap run:
      no negative control plants its mistake there).
    judged_metrics: the summary metrics the verdict judges at the end.
    throughput_pair: `(pmap run, port run)` whose examples/s are compared.
    calibration_change: what the calibration runs change, in words.
  """

  runs: ClassVar[tuple[RunSpec, ...]] = ()
  pairs: ClassVar[tuple[tuple[str, str], ...]] = ()
  tolerances: ClassVar[dict[str, Tolerance]] = {}
  negative_controls: ClassVar[tuple[NegativeControl, ...]] = ()
  port_runs: ClassVar[tuple[str, ...]] = ("shard_map", "jit")
  truth: ClassVar[str] = "reference"
  witness: ClassVar[str] = "pmap"
  judged_metrics: ClassVar[tuple[str, ...]] = ("test_loss", "test_accuracy")
  throughput_pair: ClassVar[tuple[str, str]] = ("pmap", "shard_map")
  calibration_change: ClassVar[str] = "its rows reordered"

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
    """The negative control called `name` (`NAME:N` for one that starts at
    optimiser step N)."""
    return negative_controls.chosen(self.negative_controls, name, self.name)

  # --- what it prints: read by the CLI, never by the engine ----------------

  loss_convention: ClassVar[str] = (
      "train loss as the classic program reports it: the cross entropy "
      "summed over each device's batch, averaged over devices (sum / "
      "n_devices), so it grows with the per-device batch; test loss is the "
      "mean per example")
  plot_members: ClassVar[bool] = False  # `--plot` draws each member's

  def report_fields(self, config) -> dict:
    """Fields the CLI adds to the report's top level."""
    del config
    return {}

  def run_fields(self, config, name: str) -> dict:
    """Fields the CLI adds to run `name`'s entry in the report."""
    del config, name
    return {}

  def report_lines(self, report: dict) -> list[str]:
    """Printed lines only this strategy has, from the finished report."""
    del report
    return []
