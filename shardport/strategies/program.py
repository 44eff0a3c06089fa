"""What training needs of a program: the `Program` class, with real defaults.

A program (data_parallel, ensemble, accumulation, ...) is one module in every
backend plus this description of it: its config, all its input validation,
the calls of its step per optimiser step, its evaluation cadence and how its
test metrics are summarised. How `compare` judges a program (runs, pairs,
tolerances, controls, report lines) is not here: `strategy.Strategy`
extends it. Subclasses override only what differs.
"""

import dataclasses
import math
from typing import ClassVar

import numpy as np

from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import datasets
from shardport.workloads import registry


class Program:
  """One training program, as every backend runs it; subclass and fill in.

  Attributes:
    name: the `--strategy` name.
    program: the backends' module name (`sharded/<program>.py`).
    rank: the program's place in every list of them (the CLI's choices,
      the guide's tables): the order the guide teaches them in.
    config_class: the config dataclass the program takes.
    defaults: config values the CLI uses unless the workload or user says.
    workloads: the workloads this program trains.
    loss_depends_on_devices: whether a step's loss normalisation follows the
      device count (the classic loss sums over each device's batch), so that
      a state moved to another device count continues differently.
    restores: other programs whose checkpoints this one resumes: the same
      state, saved in the same layout (whole leaves).
  """

  name: ClassVar[str] = ""
  program: ClassVar[str] = ""
  rank: ClassVar[int] = 0
  config_class: ClassVar[type] = configs.TrainConfig
  defaults: ClassVar[dict] = {}
  workloads: ClassVar[tuple[str, ...]] = tuple(registry.WORKLOADS)
  loss_depends_on_devices: ClassVar[bool] = True
  restores: ClassVar[tuple[str, ...]] = ()

  # --- configuration and validation -------------------------------------

  def make_config(self, options: dict, data: datasets.Dataset):
    """The config from CLI options over the workload's and program's defaults.

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

  def check_module(self, module, config, n_devices: int) -> None:
    """Raises when backend program `module` cannot run `config` on
    `n_devices` devices in all (a backend's declared limits)."""
    del module, config, n_devices

  # --- how it steps and evaluates -----------------------------------------

  def calls_per_step(self, config, run: str | None = None) -> int:
    """Calls of run `run`'s step (a port's if None) per optimiser step."""
    del config, run
    return 1

  def eval_every(self, config, n_train: int) -> int:
    """Steps between test evaluations: ten per run, as a learning curve."""
    del n_train
    return max(1, config.steps // 10)

  def summarize(self, sums: dict, config) -> dict:
    """Test loss, and accuracy where the workload classifies."""
    return summarize_sums(sums, registry.get(config.workload).classifies)


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
