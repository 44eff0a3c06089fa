"""The report's calibration entry (`compare._src.prove.outcome`), from
made-up calibration runs: what the report shows of them, and their
envelope, no run."""

import numpy as np

from compare._src.prove import outcome
from compare._src.prove import runner
from compare._src.prove import strategy_plan
from shardport import strategies
from shardport.workloads import datasets


def test_calibration_band_is_the_largest_drift_of_its_runs():
  curves = {"calibration": [1e-8, 4e-8, 1e-8],
            "calibration_batch": [2e-8, 1e-8, 1e-8],
            "calibration_seed1": [1e-8, 1e-8, 9e-8]}
  calibrations = [runner.Run(name, None, "reference",
                             perturbation=perturbation,
                             summary={"test_loss": 1.0 + i,
                                      "test_accuracy": 0.5},
                             host={"params": {"w": np.full(2, i, np.float32)}})
                  for i, (name, perturbation) in enumerate(
                      runner.CALIBRATIONS.items())]
  drift = {f"reference~{name}": curve for name, curve in curves.items()}
  strategy = strategies.get("data_parallel")
  data = datasets.load("linreg")
  config = strategy.make_config({"workload": "linreg"}, data)
  report = outcome._calibration_report(  # pylint: disable=protected-access
      strategy_plan.plan(strategy, config, data, 8), calibrations, drift)
  assert report["drift_per_step"] == [2e-8, 4e-8, 9e-8]
  assert [s["test_loss"] for s in report["summaries"]] == [1.0, 2.0, 3.0]
  assert "across the whole batch" in (
      report["samples"]["calibration_batch"]["perturbation"])
  assert not drift  # every calibration curve moved into the report
