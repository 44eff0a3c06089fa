"""What every strategy is made of, with real defaults: the `Strategy` class.

A strategy (data_parallel, ensemble, accumulation, ...) is one program in
every backend plus what `compare` needs to judge it: its config, all its
input validation, its runs and the pairs it compares, its tolerances with
their reasons, its summary, its report lines and its plot. Subclasses
override only what differs from these defaults.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from compare import plots
from compare.tolerances import Tolerance
from workloads import batches
from workloads import configs
from workloads import datasets
from workloads import registry


@dataclasses.dataclass(frozen=True)
class Run:
  """One run: its name in the report, its strategy module and variant."""

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
# runs in docs/measured/verdicts.json (`docs/verdict_runs.py`, quoted in the
# guide's section 4): correct ports track the band or stay below it, while
# every planted mistake drifts far above it.
CALIBRATION_MULTIPLE = 3.0


class Strategy:
  """One program compared across backends; subclass and fill in.

  Attributes:
    name: the `--strategy` name.
    program: the backends' module name (`legacy_pmap/<program>.py`).
    config_class: the config dataclass the program takes.
    defaults: config values the CLI uses unless the workload or user says.
    workloads: the workloads this program trains.
    runs: every run, the reference last.
    pairs: `(a, b)` pairs compared, `b` taken as ground truth.
    tolerances: `{"first_step", "final"}` tolerances with their reasons.
    calibration_multiple: how far above the calibration curve a non-bitwise
      pair may drift (see `CALIBRATION_MULTIPLE`).
    negative_controls: the mistakes `--negative-control` can plant.
    port_runs: the runs a negative control plants its mistake in.
    loss_convention: what the reported losses are, in one sentence.
  """

  name: ClassVar[str] = ""
  program: ClassVar[str] = ""
  config_class: ClassVar[type] = configs.TrainConfig
  defaults: ClassVar[dict] = {}
  workloads: ClassVar[tuple[str, ...]] = tuple(registry.WORKLOADS)
  runs: ClassVar[tuple[Run, ...]] = ()
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

  # --- configuration and validation -------------------------------------

  def make_config(self, options: dict, data: datasets.Dataset):
    """The config from CLI options over the workload's and strategy's defaults.

    Args:
      options: option name -> value, only those given.
      data: the dataset, whose example shape the config records.

    Returns:
      A `config_class` instance.
    """
    workload = registry.get(options.get("workload", self.workloads[0]))
    fields = {f.name for f in dataclasses.fields(self.config_class)}
    given = {k: v for k, v in options.items() if k in fields}
    return self.config_class(**{
        **self.defaults, **workload.defaults, **given,
        "workload": workload.name, "dataset": data.name,
        "input_shape": tuple(data.train_inputs.shape[1:])})

  def validate(self, config, data: datasets.Dataset, n_devices: int,
               n_processes: int = 1) -> None:
    """Raises a ValueError (one line) for any input the program cannot take.

    Called before anything compiles. Subclasses extend `check_layout`.
    """
    if config.workload not in self.workloads:
      raise registry.WorkloadError(
          f"the {self.name} strategy trains {', '.join(self.workloads)}; "
          f"--workload {config.workload} is not one of them")
    rate = config.learning_rate
    if not (math.isfinite(rate) and rate > 0):
      raise configs.ConfigError(
          f"--learning-rate must be a finite positive number, got {rate}")
    if not 0 <= config.momentum < 1:
      raise configs.ConfigError(
          f"--momentum must be in [0, 1), got {config.momentum}")
    registry.check_data(registry.get(config.workload), data)
    if config.global_batch > len(data.train_inputs):
      raise batches.BatchError(
          f"global batch {config.global_batch} exceeds the "
          f"{len(data.train_inputs)} training examples")
    self.check_layout(config, n_devices, n_processes)

  def check_layout(self, config, n_devices: int, n_processes: int) -> None:
    """Raises when the batch does not divide over processes and devices."""
    parts = n_devices * n_processes
    if config.global_batch % parts:
      where = (f"{n_devices} devices" if n_processes == 1 else
               f"{n_processes} processes x {n_devices} devices")
      raise batches.BatchError(f"batch size {config.global_batch} does not "
                               f"divide over {where}")

  # --- what runs -----------------------------------------------------------

  def active_runs(self, config, n_devices: int) -> tuple[str, ...]:
    """The runs that can run with this config on `n_devices` devices."""
    del config, n_devices
    return tuple(run.name for run in self.runs)

  def why_skipped(self, config, n_devices: int) -> str:
    """Why the runs left out by `active_runs` did not run."""
    del config, n_devices
    return ""

  def calls_per_step(self, config, run: str | None = None) -> int:
    """Calls of run `run`'s step (a port's if None) per optimiser step."""
    del config, run
    return 1

  def eval_every(self, config, n_train: int) -> int:
    """Steps between test evaluations: ten per run, as a learning curve."""
    del n_train
    return max(1, config.steps // 10)

  def control(self, name: str) -> NegativeControl:
    """The negative control called `name`."""
    for control in self.negative_controls:
      if control.name == name:
        return control
    raise configs.ConfigError(
        f"unknown --negative-control {name!r} for {self.name}; choose one of "
        f"{', '.join(c.name for c in self.negative_controls)}")

  # --- what it reports ---------------------------------------------------

  def summarize(self, sums: dict, config) -> dict:
    """Test loss, and accuracy where the workload classifies."""
    return summarize_sums(sums, registry.get(config.workload).classifies)

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


def summarize_sums(sums: dict, classifies: bool = True) -> dict:
  """Test loss, and accuracy where it means something, from metric sums.

  Args:
    sums: `{"loss_sum", "correct", "count"}` summed over the test set.
    classifies: False for regression, whose accuracy is reported as None.

  Returns:
    `{"test_loss", "test_accuracy"}`.
  """
  count = float(np.sum(sums["count"]))
  accuracy = float(np.sum(sums["correct"])) / count if classifies else None
  return {"test_loss": float(np.sum(sums["loss_sum"])) / count,
          "test_accuracy": accuracy}
