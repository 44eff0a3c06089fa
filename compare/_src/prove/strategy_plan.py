"""One of our strategies not yet written as a `Port` as the engine proves
it: `plan` (data_parallel and accumulation are Ports: `compare._src.ports`).

A strategy (`shardport.strategies`) describes its runs, pairs, tolerances
and controls, and by methods of its config and device count which runs run
here (each one call per optimiser step); this asks each once and
returns the engine's `Plan`, so nothing in the engine calls back into a
strategy. What all our strategies share is here, once: each trains on its
data set's batches in the seed's order, is timed on the next seed's, tested
on the test set, and calibrated by the reference on its rows reordered.
"""

from compare._src.prove.plan import Plan
from compare._src.prove.plan import PlannedRun
from shardport.strategies import perturbations
from shardport.workloads import batches


def _lockstep_perturbation(t: int):
  """How the one-step band's step t changes the ground truth's: its rows
  reordered, within each device's slice or across the batch by turns."""
  return perturbations.RowOrder(("slices", "batch")[t % 2], 7)


def plan(strategy, config, data, n_devices: int) -> Plan:
  """`strategy` with `config` and `data`, on `n_devices` in all.

  Args:
    strategy: a registered strategy (`shardport.strategies.get`).
    config: its checked config.
    data: its data set.
    n_devices: devices in all processes.

  Returns:
    The `Plan`: the runs that run here (those left out in `skipped`, with
    why), the batches, the test batch and
    how its sums are summarised, the calibration runs and the judging.
  """
  active = strategy.active_runs(config, n_devices)
  runs = tuple(PlannedRun(run.name, run.module, run.variant)
               for run in strategy.runs if run.name in active)
  skipped = {run.name: strategy.why_skipped(config, n_devices)
             for run in strategy.runs if run.name not in active}
  calibrations = dict(perturbations.CALIBRATIONS)
  test_batch = batches.test_batch(data, n_devices)
  return Plan(
      name=strategy.name, runs=runs, skipped=skipped,
      pairs=tuple(strategy.pairs), truth=strategy.truth,
      witness=strategy.witness, port_runs=tuple(strategy.port_runs),
      tolerances=dict(strategy.tolerances),
      judged_metrics=tuple(strategy.judged_metrics),
      throughput_pair=tuple(strategy.throughput_pair),
      train_batches=lambda: batches.train_batches(
          data, config.seed, config.global_batch, config.steps),
      timing_batches=lambda count: list(batches.train_batches(
          data, config.seed + 1, config.global_batch, count)),
      test_batch=test_batch, test_size=len(test_batch["targets"]),
      eval_every=strategy.eval_every(config, len(data.train_inputs)),
      summarize=lambda sums: strategy.summarize(sums, config),
      calibrations=calibrations,
      calibration_change=strategy.calibration_change,
      calibration_summary=(
          f"the reference trained again with its batch rows in "
          f"{len(calibrations)} other orders (summation order only); the "
          "band is their largest drift per step"),
      lockstep_perturbation=_lockstep_perturbation,
      negative_controls=tuple(strategy.negative_controls))
