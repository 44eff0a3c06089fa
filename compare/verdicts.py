"""The verdicts: the first step, the final state against a calibration, and
divergence.

After one step every pair must be within the strategy's first-step tolerance
(a 1% learning-rate change is 1000x above it). At the end a pair is either
bitwise, at any length, or judged against the calibration measured in the
same run: the reference trained again with only float rounding changed (its
batch rows summed in other orders, `compare.runner.CALIBRATIONS`). Rounding
alone separates two correct runs chaotically, so the pair passes when its
drift stays within `strategy.calibration_multiple` times the largest of
those curves at every step and its test metrics within the same multiple of
the calibrations' spread. A flip (a one-step jump of the drift from within
the band, `FLIP_JUMP`) ends the state comparison: the metrics judge the
rest.
"""

import numpy as np

from compare import equivalence

DIVERGED = "diverged"
# Drift below this fraction of the reference's largest |param| is float
# noise (about 8 ulps of the largest weight): the band never goes below it.
NOISE_FLOOR = 1e-6
# A one-step rise of a pair's drift by this factor (over its previous drift
# and the calibration's level), from within the band, is a discrete flip: a
# ReLU or a max-pool choice that one run takes and the other does not, at a
# step no calibration run can predict. Measured on correct ports where three
# calibration runs had none: 80x in one step (data_parallel, 2 devices), 14x
# (random labels), 5x (accumulation, 1 device); chaotic growth without a
# flip rose at most 3x a step in the same runs. From a flip on, the two runs
# are different samples of the same training, and only their test metrics
# can be compared.
FLIP_JUMP = 4.0
# ... and lands within this multiple of the band: a flip moves a few
# activations, not the whole state. Measured at the flip step: 1.0-55x on
# correct ports (55x: 16 vmapped ensemble members); a restore that is 0.1%
# off lands at 1000x and must not pass for a flip.
FLIP_LANDS_WITHIN = 100.0


def first_step(strategy, pairs, firsts) -> list[dict]:
  """Every pair after one step, against the first-step tolerance."""
  tol = strategy.tolerances["first_step"]
  return [{"a": a, "b": b, "at": "first_step",
           **equivalence.compare_trees(firsts[a], firsts[b], tol)}
          for a, b in pairs]


def _band(drift, calibration, floor):
  """Per-step ratio of a pair's drift to the calibration's running maximum."""
  envelope = np.maximum.accumulate(np.maximum(np.asarray(calibration), floor))
  return np.asarray(drift, np.float64) / envelope


def _first_flip(drift, calibration, ratios, multiple):
  """The index of the first flip (see FLIP_JUMP), or None.

  A flip is a rise by FLIP_JUMP in one step above both the pair's previous
  drift and the calibration's level there, from a step within the band, to
  within FLIP_LANDS_WITHIN times the band.
  """
  level = np.maximum(np.asarray(drift, np.float64),
                     np.maximum.accumulate(np.asarray(calibration,
                                                      np.float64)))
  for i in range(1, len(level)):
    if ratios[i - 1] > multiple:
      return None  # left the band before any flip: not excused
    if level[i - 1] > 0 and drift[i] >= FLIP_JUMP * level[i - 1]:
      return i if ratios[i] <= FLIP_LANDS_WITHIN else None
  return None


def _largest_param(host):
  return max((float(np.max(np.abs(x), initial=0.0))
              for x in _float_leaves(host["params"])), default=1.0)


def _float_leaves(tree):
  import jax  # pylint: disable=g-import-not-at-top
  return [np.asarray(x) for x in jax.tree.leaves(tree)
          if np.issubdtype(np.asarray(x).dtype, np.floating)]


def _metric_check(summaries, a, b, calibration, n_test, multiple):
  """Test loss and accuracy of a pair within the calibration's spread."""
  out = {}
  # The calibration runs moved the reference: the spread is measured there.
  ref = summaries["reference"]
  # A few calibration runs estimate the spread from few samples, so it is
  # floored: 1% of the test loss and 1% accuracy (or one test example) are
  # within what rounding alone moved them in the measured long runs.
  for key, floor in (("test_loss", 1e-2 * abs(ref["test_loss"])),
                     ("test_accuracy", max(1e-2, 1.0 / n_test))):
    if ref.get(key) is None:
      continue
    spread = max([abs(cal[key] - ref[key]) for cal in
                  calibration["summaries"]] + [floor])
    gap = abs(summaries[a][key] - summaries[b][key])
    out[key] = {"gap": gap, "calibration_spread": spread,
                "within": bool(gap <= multiple * spread)}
  return out


def final(strategy, pairs, finals, drift, calibration, summaries,
          n_test) -> list[dict]:
  """Every pair at the end: bitwise, or judged against the calibration."""
  tol = strategy.tolerances["final"]
  multiple = strategy.calibration_multiple
  results = []
  for a, b in pairs:
    result = {"a": a, "b": b, "at": "final",
              **equivalence.compare_trees(finals[a], finals[b], tol),
              "drift_per_step": drift[f"{a}~{b}"]}
    if result["verdict"] != equivalence.BITWISE and calibration:
      floor = NOISE_FLOOR * _largest_param(finals[b])
      ratios = _band(result["drift_per_step"], calibration["drift_per_step"],
                     floor)
      flip = _first_flip(result["drift_per_step"],
                         calibration["drift_per_step"], ratios, multiple)
      judged = ratios[:flip]  # the state up to a flip, the metrics always
      metrics = _metric_check(summaries, a, b, calibration, n_test, multiple)
      within = bool(np.all(judged <= multiple)) and all(
          m["within"] for m in metrics.values())
      result["calibration"] = {
          "multiple": multiple, "max_ratio": float(np.max(judged)),
          "worst_step": int(np.argmax(judged)) + 1, "noise_floor": floor,
          "flip_step": None if flip is None else flip + 1,
          "max_ratio_after_flip": (None if flip is None else
                                   float(np.max(ratios[flip:]))),
          "metrics": metrics}
      result["verdict"] = (equivalence.CLOSE if within
                           else equivalence.DIFFER)
    results.append(result)
  return results


def overall(verdicts: list[dict], diverged: dict) -> str:
  """`diverged`, `fail` (a pair differs) or `pass`."""
  if diverged:
    return DIVERGED
  if any(v["verdict"] == equivalence.DIFFER for v in verdicts):
    return "fail"
  return "pass"
