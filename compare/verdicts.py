"""The verdicts: the first step, the final state against a calibration, and
divergence.

After one step every pair must be within the strategy's first-step tolerance
(a 1% learning-rate change is 1000x above it). At the end a pair is either
bitwise, at any length, or judged against the calibration measured in the
same run: the reference trained again with only float rounding changed (its
batch rows summed in another order). Rounding alone separates two correct
runs chaotically, so the pair passes when its drift stays within
`strategy.calibration_multiple` times that curve at every step and its test
metrics within the same multiple of the calibration's.
"""

import numpy as np

from compare import equivalence

DIVERGED = "diverged"
# Drift below this fraction of the reference's largest |param| is float
# noise (about 8 ulps of the largest weight): the band never goes below it.
NOISE_FLOOR = 1e-6


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
  # The calibration moved the reference: its spread is measured there.
  ref, cal = summaries["reference"], calibration["summary"]
  # One calibration run estimates the spread from one sample, so it is
  # floored: 1% of the test loss and 1% accuracy (or one test example) are
  # within what rounding alone moved them in the measured long runs.
  for key, floor in (("test_loss", 1e-2 * abs(ref["test_loss"])),
                     ("test_accuracy", max(1e-2, 1.0 / n_test))):
    if ref.get(key) is None:
      continue
    spread = max(abs(cal[key] - ref[key]), floor)
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
      metrics = _metric_check(summaries, a, b, calibration, n_test, multiple)
      within = bool(np.all(ratios <= multiple)) and all(
          m["within"] for m in metrics.values())
      result["calibration"] = {
          "multiple": multiple, "max_ratio": float(np.max(ratios)),
          "worst_step": int(np.argmax(ratios)) + 1, "noise_floor": floor,
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
