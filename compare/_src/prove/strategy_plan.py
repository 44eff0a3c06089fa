"""One of our strategies as the engine proves it: `plan`.

A strategy (`shardport.strategies`) describes itself by methods of its
config, data set and device count; this asks each once and returns the
engine's `Plan`, so nothing in the engine calls back into a strategy.
"""

from compare._src.prove.plan import Plan
from compare._src.prove.plan import PlannedRun


def plan(strategy, config, data, n_devices: int) -> Plan:
  """`strategy` with `config` and `data`, on `n_devices` in all.

  Args:
    strategy: a registered strategy (`shardport.strategies.get`).
    config: its checked config.
    data: its data set.
    n_devices: devices in all processes.

  Returns:
    The `Plan`: the runs that run here (those left out in `skipped`, with
    why), their calls per optimiser step, the batches, the test batch and
    how its sums are summarised, the calibration runs and the judging.
  """
  active = strategy.active_runs(config, n_devices)
  runs = tuple(PlannedRun(run.name, run.module, run.variant,
                          calls=strategy.calls_per_step(config, run.name))
               for run in strategy.runs if run.name in active)
  skipped = {run.name: strategy.why_skipped(config, n_devices)
             for run in strategy.runs if run.name not in active}
  calibrations = strategy.calibrations()
  return Plan(
      name=strategy.name, runs=runs, skipped=skipped,
      pairs=tuple(strategy.pairs), truth=strategy.truth,
      witness=strategy.witness, port_runs=tuple(strategy.port_runs),
      tolerances=dict(strategy.tolerances),
      judged_metrics=tuple(strategy.judged_metrics),
      throughput_pair=tuple(strategy.throughput_pair),
      train_batches=lambda: strategy.train_batches(config, data),
      timing_batches=lambda count: strategy.timing_batches(config, data,
                                                            count),
      test_batch=strategy.test_batch(data, n_devices),
      test_size=strategy.test_size(data, n_devices),
      eval_every=strategy.eval_every(config, strategy.train_size(data)),
      summarize=lambda sums: strategy.summarize(sums, config),
      calibrations=calibrations,
      calibration_change=strategy.calibration_change,
      calibration_summary=strategy.calibration_summary(len(calibrations)),
      lockstep_perturbation=strategy.lockstep_perturbation,
      negative_controls=tuple(strategy.negative_controls))
