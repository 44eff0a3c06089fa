"""The verdicts: the first step, the lockstep checks, the final state, and
divergence.

After one step every pair must be within the multiple of the one-step band
(without checks, the program's first-step tolerance; a 1% learning-rate
change is 1000x above either). At every checked step every pair's step from
one shared state must stay within `judging.LOCKSTEP_MULTIPLE` times the
one-step band (`compare._src.prove.lockstep`): the test of correctness at any
length, since nothing carries over from one step to the next. A pair of two
programs may part at a few steps by a rounding flip where every port run
took pmap's step, and says so: one rule (`flips.over_and_excused`) for the first step and
every checked step. At the end every run evaluates one state (the ground
truth's final one) with its own `evaluate`: a pair's metrics must agree to
rounding. The free-running runs' test metrics against the spread of the
calibration runs (the reference trained again with its batch rows summed in
other orders, `compare._src.prove.runner.CALIBRATIONS`), and their drift against
the calibration band, are shown, not judged: rounding alone separates two
correct runs chaotically.
"""

import numpy as np

from compare._src.prove import equivalence
from compare._src.prove import flips
from compare._src.prove import judging
from compare._src.prove import leaf_bands

DIVERGED = "diverged"
# Drift below this fraction of the reference's largest |param| is float
# noise (about 8 ulps of the largest weight): the band never goes below it.
NOISE_FLOOR = 1e-6


def first_step(plan, pairs, firsts, checks=None, measured=None):
  """Every pair after one free-running step from its own initial state.

  With lockstep checks, a pair that is not bitwise is judged as lockstep
  judges a step, its flips too (`_first_step_flip`): its difference as a
  fraction of the step's update from the common initial state, within the
  multiple of the one-step band. An initial state planted wrong is as far
  apart as the states, the update's own rounding (random data's cancelling
  gradients: 3.3e-6 absolute on a bias, beyond 1e-5 of its largest
  element) within the band. Without checks (timing the checks' cost), the
  strategy's first-step tolerance judges, shown beside the ratio always.
  `measured`: `equivalence.compare_pairs` of the step as it ran (`firsts`
  then unread: no host copy kept to the end). Returns the results."""
  tol = plan.tolerances["first_step"]
  measured = measured or equivalence.compare_pairs(
      pairs, firsts, tol, (checks or {}).get("initial"))
  results = []
  for a, b in pairs:
    stats, errors = measured[a, b]
    result = {"a": a, "b": b, "at": "first_step", **stats}
    if checks and errors is not None:
      ratio, leaf = leaf_bands.score(errors, checks["judged"])
      result["band_ratio"] = ratio
      result["band_leaf"] = leaf
      result["allowed_ratio"] = checks["multiple"]
      over = ratio > checks["multiple"]
      result["flip_steps"] = [1] if over and flips.first_step_flip(
          checks, a, b) else []
      result["verdict"] = (equivalence.DIFFER if over and not
                           result["flip_steps"] else equivalence.CLOSE)
    results.append(result)
  return results



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


def _metric_check(summaries, a, b, calibration, n_test, multiple, truth,
                  keys):
  """The judged metrics of a pair within the calibration's spread."""
  out = {}
  # The calibration runs moved the ground truth: the spread is measured there.
  ref = summaries[truth]
  for key in keys:
    if ref.get(key) is None:
      continue
    spread = max([abs(cal[key] - ref[key]) for cal in
                  calibration["summaries"]] + [_floor(key, ref[key], n_test)])
    gap = abs(summaries[a][key] - summaries[b][key])
    out[key] = {"gap": gap, "calibration_spread": spread,
                "within": bool(gap <= multiple * spread)}
  return out


def _floor(key, value, n_test):
  """A few calibration runs estimate the spread from few samples, so it is
  floored: 1% of the metric, and for an accuracy 1% or one test example,
  are within what rounding alone moved them in the measured long runs."""
  if "accuracy" in key:
    return max(1e-2, 1.0 / n_test) if n_test else 1e-2
  return 1e-2 * abs(value)






# A metric of one step from the same state (a loss, a learning rate, a norm)
# differs only by rounding, and a ReLU flip moves no loss (ReLU is
# continuous). But rounding grows relative to a loss as the loss shrinks:
# each example's logits differ by ulps between programs of other shapes,
# and a late, small loss is made of small terms. Measured: 1.13e-5 between
# pmap and the one-device reference at step 633 of data_parallel on digits
# over 1000 steps (the calibration's reordered rows move it far less, so
# its band does not see it). A metric reported wrong moves far more: one
# device's loss x 1.01 in 8 moves their mean by 1.25e-3, 12.5x this bound.
METRIC_RTOL = 1e-4


def _step_metric(checks, key, gap):
  """`(gap, allowed)` of one metric at one step: an accuracy's absolute
  gap against one example of the batch; any other's gap relative to it
  against `METRIC_RTOL` or the multiple of what the calibration step moved
  it, the larger."""
  if "acc" in key and checks.get("batch_rows"):
    return gap[0], (1.0 + 1e-6) / checks["batch_rows"]
  band = checks.get("metric_band", {}).get(key, 0.0)
  return (equivalence.relative_gap(gap),
          max(METRIC_RTOL, checks["multiple"] * band))


def _metric_failure(checks, pair):
  """The first checked step where a metric of the pair lies too far apart:
  `(index, metric, gap, allowed)`, or None."""
  for i, gaps in enumerate(pair.get("metric_gaps", [])):
    for key, gap in gaps.items():
      measured, allowed = _step_metric(checks, key, gap)
      if measured > allowed:
        return i, key, measured, allowed
  return None


def _metric_fields(checks, pair):
  """The pair's metrics in the lockstep entry: the largest gap of each (as
  judged), and the first step where one lies too far apart."""
  largest = {}
  for gaps in pair.get("metric_gaps", []):
    for key, gap in gaps.items():
      largest[key] = max(largest.get(key, 0.0),
                         _step_metric(checks, key, gap)[0])
  failure = _metric_failure(checks, pair)
  return {"metric_max_gap": largest,
          "metric_fail": None if failure is None else {
              "step": checks["steps"][failure[0]], "metric": failure[1],
              "gap": failure[2], "allowed": failure[3]}}


def lockstep(checks: dict) -> list[dict]:
  """Every pair at every checked step, from the shared state, against the
  one-step band (`compare._src.prove.lockstep`); a pair of two programs that parts at
  a few steps where every port run took its witness's step is excused (a
  rounding flip), and says so."""
  if not checks["checked_steps"]:
    return []
  results = []
  for name, pair in checks["pairs"].items():
    a, b = name.split("~")
    errors = np.asarray(pair["errors"], np.float64)
    # Each step's largest error over the judged leaves, each in units of
    # its own band (`compare._src.prove.leaf_bands`).
    ratios = np.asarray(pair["ratios"], np.float64)
    over, excused = flips.over_and_excused(checks, a, b)
    failing = [int(i) for i in over if int(i) not in excused]
    worst = int(np.argmax(ratios)) if len(ratios) else 0
    metric = _metric_failure(checks, pair)
    if metric is not None:
      verdict = equivalence.DIFFER
    elif not np.any(errors):
      verdict = equivalence.BITWISE
    else:
      verdict = equivalence.DIFFER if len(failing) else equivalence.CLOSE
    results.append({
        "a": a, "b": b, "at": "lockstep", "verdict": verdict,
        "max_error": float(errors.max(initial=0.0)),
        "max_ratio": float(ratios.max(initial=0.0)),
        "worst_step": checks["steps"][worst] if len(ratios) else None,
        "first_fail_step": (checks["steps"][int(failing[0])]
                            if len(failing) else None),
        "first_fail_ratio": (float(ratios[failing[0]]) if len(failing)
                             else None),
        "first_fail_leaf": (pair.get("leaves", [""] * len(errors))[
            int(failing[0])] if len(failing) else None),
        "flip_steps": [checks["steps"][i] for i in excused],
        **_metric_fields(checks, pair),
        "allowed_ratio": checks["multiple"],
        "judged_leaves": checks.get("judged_leaves"),
        "leaves": checks.get("leaves"),
        "unjudged_leaves": checks.get("unjudged_leaves", {}),
        "stopped_bitwise_at": pair["stopped_bitwise_at"]})
  return results


# Two runs' evaluations of one state differ only in summation order: a loss
# by a few float32 roundings of itself, an accuracy by a test example whose
# top two logits tie within rounding. Evaluation mistakes move them by far
# more (device 0's loss x 1.01 is 1e-2 of it; one device's examples left
# out is 1/N of the test set).
SHARED_EVAL_RTOL = 1e-5


def _allowed_gap(key, value, n_test):
  if "accuracy" in key:
    # One example, with room for the float division that made the rates.
    return (1.0 + 1e-6) / n_test if n_test else 0.0
  return SHARED_EVAL_RTOL * max(abs(value), 1e-6)


def _shared_check(shared, a, b, n_test, keys):
  """Each judged metric of `a`'s and `b`'s own evaluation of one state."""
  out = {}
  for key in keys:
    if shared[b].get(key) is None or shared[a].get(key) is None:
      continue
    gap = abs(shared[a][key] - shared[b][key])
    allowed = _allowed_gap(key, shared[b][key], n_test)
    out[key] = {"a": shared[a][key], "b": shared[b][key], "gap": gap,
                "allowed": allowed, "within": bool(gap <= allowed)}
  return out


def final(plan, pairs, finals, drift, calibration, summaries,
          n_test, shared=None, steps=None) -> list[dict]:
  """Every pair at the end: bitwise, or judged by each run's own evaluation
  of one state (the ground truth's final state, placed in each run's
  layout): they must agree to rounding. Free-running runs part chaotically:
  their states, and beside the calibration runs (where there are any) their
  metrics and drift, are shown, not judged."""
  tol = plan.tolerances["final"]
  multiple = judging.CALIBRATION_MULTIPLE
  results = []
  for a, b in pairs:
    result = {"a": a, "b": b, "at": "final",
              **equivalence.compare_trees(finals[a], finals[b], tol),
              "drift_per_step": drift[f"{a}~{b}"]}
    if shared:
      result["shared_eval"] = {"step": steps, "metrics": _shared_check(
          shared, a, b, n_test, plan.judged_metrics)}
    if result["verdict"] != equivalence.BITWISE and calibration:
      floor = NOISE_FLOOR * _largest_param(finals[b])
      ratios = _band(result["drift_per_step"], calibration["drift_per_step"],
                     floor)
      metrics = _metric_check(summaries, a, b, calibration, n_test, multiple,
                              plan.truth, plan.judged_metrics)
      result["calibration"] = {
          "multiple": multiple, "max_ratio": float(np.max(ratios)),
          "worst_step": int(np.argmax(ratios)) + 1, "noise_floor": floor,
          "metrics": metrics, "judged": False}
    if result["verdict"] != equivalence.BITWISE:
      result["verdict"] = equivalence.CLOSE
    if shared and not all(m["within"] for m in
                          result["shared_eval"]["metrics"].values()):
      result["verdict"] = equivalence.DIFFER
    results.append(result)
  return results


def handover(switched: dict | None) -> list[dict]:
  """`--switch-at N`: every port run restored pmap's state at step N to the
  bit (its digest), or the handover changed the state.

  The lockstep checks place the reference's state at every step, so a
  restore that changes the port's own state is judged here.
  """
  if not switched:
    return []
  return [{"a": name, "b": switched["source"], "at": "switch",
           "step": switched["step"],
           "verdict": (equivalence.BITWISE
                       if restored == switched["source_digest"]
                       else equivalence.DIFFER)}
          for name, restored in switched["restored"].items()]


def first_failure(verdicts: list[dict]) -> str | None:
  """The earliest failure in words (what failed, at which step, by how
  much), or None."""
  for v in verdicts:
    if v["at"] == "switch" and v["verdict"] == equivalence.DIFFER:
      return (f"at the switch, step {v['step']}: {v['a']} restored another "
              f"state than {v['b']} saved")
  failing = [v for v in verdicts if v["verdict"] == equivalence.DIFFER]
  first = [v for v in failing if v["at"] == "first_step"]
  if first:
    v = first[0]
    if "band_ratio" in v:
      return (f"first at step 1: {v['a']} vs {v['b']}, each from its own "
              f"initial state, differ by {v['band_ratio']:.3g}x the "
              f"one-step band (allowed {v['allowed_ratio']:g}x), most at "
              f"{v.get('band_leaf') or v['worst']}")
    return (f"first at step 1: {v['a']} vs {v['b']} differ by "
            f"{v['max_abs']:.3g} at {v['worst']} (rtol {v['rtol']:g}, atol "
            f"{v['atol']:g} of the leaf's largest)")
  steps = [v for v in failing if v["at"] == "lockstep"]
  first_step = lambda v: min(  # pylint: disable=unnecessary-lambda-assignment
      t for t in (v["first_fail_step"],
                  (v.get("metric_fail") or {}).get("step")) if t)
  if steps:
    v = min(steps, key=first_step)
    m = v.get("metric_fail")
    if m and m["step"] == first_step(v):
      return (f"first at step {m['step']}: {v['a']} vs {v['b']}, their "
              f"steps from the shared state report {m['metric']} "
              f"differently (gap {m['gap']:.3g} of it, allowed "
              f"{m['allowed']:.3g})")
    return (f"first at step {v['first_fail_step']}: {v['a']} vs {v['b']}, "
            "their steps from the shared state differ by "
            f"{v['first_fail_ratio']:.3g}x the one-step band (allowed "
            f"{v['allowed_ratio']:g}x)"
            + (f", most at {v['first_fail_leaf']}" if v.get("first_fail_leaf")
               else ""))
  ends = [v for v in failing if v["at"] == "final" and "shared_eval" in v]
  if ends:
    v = ends[0]
    key, m = next((k, m) for k, m in v["shared_eval"]["metrics"].items()
                  if not m["within"])
    return (f"at the end, step {v['shared_eval']['step']}: {v['a']} and "
            f"{v['b']} evaluate the same state differently: {key} "
            f"{m['a']:.6g} vs {m['b']:.6g} (gap {m['gap']:.3g}, allowed "
            f"{m['allowed']:.3g})")
  return None


def overall(verdicts: list[dict], diverged: dict) -> str:
  """`diverged`, `fail` (a pair differs) or `pass`."""
  if diverged:
    return DIVERGED
  if any(v["verdict"] == equivalence.DIFFER for v in verdicts):
    return "fail"
  return "pass"
