"""How a `Port`'s runs are calibrated and evaluated (`port_runs.plan`):
the calibration runs and the lockstep's perturbation its `calibration`
asks for, and the test evaluation its `device_evaluation` or `evaluate`
gives.
"""

from compare._src.prove import device_evaluation
from shardport.strategies import perturbations

# The calibration runs' nudge seeds (`perturbations.BatchNudge`).
NUDGE_SEEDS = {"calibration": 1, "calibration_seed2": 2,
               "calibration_seed3": 3}


def calibration(port, truth, batch, count: int) -> dict:
  """The Port's calibration (`Port.calibration`) as the `Plan` holds it:
  `count` calibration runs, the lockstep's one-step perturbation, and
  both in words."""
  if port.calibration == "row_order":
    runs = dict(list(perturbations.CALIBRATIONS.items())[:count])
    return dict(
        calibrations=runs, calibration_change="its rows reordered",
        calibration_summary=(
            f"the {truth} trained again with its batch rows in {len(runs)} "
            "other orders (summation order only); the band is their "
            "largest drift per step"),
        # Rows reordered within each device's slice or across the batch,
        # by turns.
        lockstep_perturbation=lambda t: perturbations.RowOrder(
            ("slices", "batch")[t % 2], 7))
  nudge = (perturbations.BatchNudge if perturbations.has_floats(batch)
           else perturbations.StateNudge)
  seeds = list(NUDGE_SEEDS.items())[:count]
  what = "batches" if nudge is perturbations.BatchNudge else "initial state"
  return dict(
      calibrations={name: nudge(seed) for name, seed in seeds},
      calibration_change=(f"its {'batch' if what == 'batches' else 'state'}"
                          "'s floats nudged by one ulp"),
      calibration_summary=(
          f"the {truth} trained again {len(seeds)} times, the floats of its "
          f"{what} moved one ulp (rounding only); the band is their largest "
          "drift per step"),
      lockstep_perturbation=lambda t: nudge(1000 + t))


def evaluation(port, state) -> dict:
  """How the Plan evaluates: on the devices' test batch
  (`Port.device_evaluation`), with `evaluate` on the host state, or not at
  all (the train loss is judged)."""
  device = port.device_evaluation
  if device is not None:
    return dict(judged_metrics=tuple(device.metrics),
                test_batch=device.batch,
                test_size=device_evaluation.test_size(device),
                summarize=device.summarize)
  return dict(judged_metrics=(("train_loss",) if port.evaluate is None else
                              tuple(port.evaluate(state))),
              test_batch={}, test_size=None,
              summarize=lambda sums: {k: float(v) for k, v in sums.items()})
