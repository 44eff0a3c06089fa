"""What `compare` runs for each strategy: runs, pairs, config, summaries."""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """One run: a name in the report, the strategy module and its variant."""

  name: str
  module: Any
  variant: str


@dataclasses.dataclass(frozen=True)
class StrategySpec:
  """How to compare one strategy's backends.

  Attributes:
    name: the `--strategy` name.
    runs: every run, the reference last.
    pairs: `(a, b)` pairs compared, `b` taken as ground truth.
    make_config: `(options, dataset) -> config` from the parsed CLI options.
    active_runs: `(config, n_devices) -> run names` that can run here.
    why_skipped: `(config, n_devices) -> reason` printed for the other runs.
    summarize: `(host eval metrics, config) -> report fields` such as test
      accuracy.
    eval_every: `(config, n_train_examples) -> steps between evaluations`, or
      None to evaluate only at the end.
    extra_report: `(config) -> fields` added to the JSON's top level.
    plot: `(report, path) -> None` writes `--plot PATH`, where supported.
    run_fields: `(config, run name) -> fields` added to that run's report.
  """

  name: str
  runs: tuple[RunSpec, ...]
  pairs: tuple[tuple[str, str], ...]
  make_config: Callable[[dict, Any], Any]
  active_runs: Callable[[Any, int], tuple[str, ...]] | None = None
  why_skipped: Callable[[Any, int], str] | None = None
  summarize: Callable[[dict, Any], dict] | None = None
  eval_every: Callable[[Any, int], int | None] | None = None
  extra_report: Callable[[Any], dict] | None = None
  plot: Callable[[dict, str], None] | None = None
  run_fields: Callable[[Any, str], dict] | None = None


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
