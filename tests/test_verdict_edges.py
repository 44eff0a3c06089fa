"""The verdicts' numbers at their edges, on made-up entries, no run: the
end's calibration entry, the floors and allowed gaps, the step metrics'
entry, and each bound taken as inclusive or strict
(`compare._src.prove.verdicts`). Written for the survivors of `python -m
bench.mutation` (bench/mutation/triage.toml)."""

import types

import numpy as np
import pytest

from compare._src.prove import lockstep
from compare._src.prove import verdicts
from shardport.strategies import tolerances

# pylint: disable=protected-access
# test_f1 first: a metric the runs do not report is skipped, not the rest.
STRATEGY = types.SimpleNamespace(
    tolerances={"final": tolerances.Tolerance(0.0, 0.0)},
    truth="reference",
    judged_metrics=("test_f1", "test_loss", "test_accuracy"))


def test_the_ends_calibration_entry_shows_drift_metrics_and_noise_floor():
  host = {"params": {"w": np.array([1.0, -4.0], np.float32),
                     "step": np.array(7, np.int32)}, "opt_state": ()}
  moved = {"params": {"w": np.array([1.0, -4.5], np.float32),
                      "step": np.array(7, np.int32)}, "opt_state": ()}
  calibration = {"drift_per_step": [1e-3, 2e-3, 1e-3],
                 "summaries": [{"test_loss": 1.02, "test_accuracy": 0.9}]}
  summaries = {"reference": {"test_loss": 1.0, "test_accuracy": 0.9},
               "a": {"test_loss": 1.05, "test_accuracy": 0.95},
               "b": {"test_loss": 1.0, "test_accuracy": 0.9}}
  result = verdicts.final(STRATEGY, [("a", "b")], {"a": moved, "b": host},
                          {"a~b": [1e-3, 1e-3, 1.6e-2]}, calibration,
                          summaries, 50)[0]
  assert result["verdict"] == "close"
  # The drift's ratio to the calibration's running largest, worst at its
  # step (1-based); the noise floor scales with the largest weight (4.0).
  assert result["calibration"] == {
      "multiple": 3.0, "max_ratio": pytest.approx(8.0), "worst_step": 3,
      "noise_floor": pytest.approx(4.0 * verdicts.NOISE_FLOOR),
      "judged": False, "metrics": {
          "test_loss": {"gap": pytest.approx(0.05),
                        "calibration_spread": pytest.approx(0.02),
                        "within": True},
          # An accuracy's spread: one test example of 50 (0.02), over 1%.
          "test_accuracy": {"gap": pytest.approx(0.05),
                            "calibration_spread": pytest.approx(0.02),
                            "within": True}}}
  bitwise = verdicts.final(STRATEGY, [("b", "b")], {"b": host},
                           {"b~b": [0.0]}, calibration, summaries, 50)[0]
  assert bitwise["verdict"] == "bitwise" and "calibration" not in bitwise
  uncalibrated = verdicts.final(STRATEGY, [("a", "b")],
                                {"a": moved, "b": host}, {"a~b": [1e-3]},
                                None, summaries, 50)[0]
  assert "calibration" not in uncalibrated


def test_the_noise_floor_lifts_a_calibration_that_never_moved():
  ratios = verdicts._band([2e-6, 3e-6], [0.0, 0.0], 1e-6)
  assert ratios.dtype == np.float64 and list(ratios) == [2.0, 3.0]
  assert verdicts._largest_param({"params": {}}) == 1.0
  assert verdicts._largest_param({"params": {"w": np.zeros(0, np.float32),
                                             "n": np.array(9)}}) == 0.0
  assert verdicts._largest_param(
      {"params": {"w": np.float32([-0.5, 0.25])}}) == 0.5


def test_a_metrics_spread_is_floored_at_1_percent_or_one_example():
  assert verdicts._floor("test_accuracy", 0.9, 50) == 0.02
  assert verdicts._floor("test_accuracy", 0.9, 1000) == 0.01
  assert verdicts._floor("test_accuracy", 0.9, 0) == 0.01
  assert verdicts._floor("test_loss", -3.0, 50) == pytest.approx(0.03)


def test_a_metric_the_truth_did_not_report_is_skipped_not_the_rest():
  summaries = {"reference": {"test_loss": None, "test_accuracy": 0.9},
               "a": {"test_accuracy": 0.92}, "b": {"test_accuracy": 0.9}}
  out = verdicts._metric_check(summaries, "a", "b", {"summaries": []}, 100,
                               1.0, "reference",
                               ("test_loss", "test_accuracy"))
  assert list(out) == ["test_accuracy"]
  assert out["test_accuracy"]["within"] is False  # 2 examples, 1 allowed
  # A gap of exactly the multiple of the spread is within it.
  at_edge = verdicts._metric_check(
      {"reference": {"test_loss": 1.0}, "a": {"test_loss": 2.0},
       "b": {"test_loss": 1.0}}, "a", "b", {"summaries": [{"test_loss": 1.5}]},
      100, 2.0, "reference", ("test_loss",))
  assert at_edge["test_loss"]["within"] is True


def test_the_shared_evaluations_gap_allowed_is_one_example_or_relative():
  assert verdicts._allowed_gap("test_accuracy", 0.5, 0) == 0.0
  assert verdicts._allowed_gap("test_accuracy", 0.5, 100) == pytest.approx(
      0.01)
  assert verdicts._allowed_gap("test_loss", -2.0, 100) == pytest.approx(
      2e-5)
  assert verdicts._allowed_gap("test_loss", 0.0, 100) == pytest.approx(
      verdicts.SHARED_EVAL_RTOL * 1e-6)


def test_the_shared_check_skips_a_metric_either_side_lacks_not_the_rest():
  shared = {"a": {"test_loss": 1.0, "test_f1": 0.5, "test_accuracy": 0.9},
            "b": {"test_loss": None, "test_accuracy": 0.91}}
  out = verdicts._shared_check(shared, "a", "b", 100,
                               ("test_loss", "test_f1", "test_accuracy"))
  assert list(out) == ["test_accuracy"]
  # No test set: an accuracy is allowed no gap, and a gap of 0 is within.
  edge = verdicts._shared_check({"a": {"test_accuracy": 0.5},
                                 "b": {"test_accuracy": 0.5}}, "a", "b", 0,
                                ("test_accuracy",))
  assert edge["test_accuracy"]["within"] is True
  host = {"params": {"w": np.ones(2, np.float32)}}
  result = verdicts.final(
      STRATEGY, [("a", "b")], {"a": host, "b": host}, {"a~b": [0.0]}, None,
      {}, 100, {"a": {"test_accuracy": 0.9}, "b": {"test_accuracy": 0.92}},
      7)[0]
  # n_test reaches the shared check: 0.02 is two examples of 100.
  assert result["shared_eval"]["metrics"]["test_accuracy"]["allowed"] == (
      pytest.approx(0.01)) and result["verdict"] == "differ"


def _checks(pairs, port_runs=("jit",), **more):
  steps = len(next(iter(pairs.values())))
  return {"multiple": 10.0, "band": 1e-5, "checked_steps": steps,
          "steps": list(range(1, steps + 1)), "port_runs": list(port_runs),
          "flip_limit": lockstep.flip_limit(steps), "witness": "pmap",
          "pairs": {name: {"errors": [None if r is None else r * 1e-5
                                      for r in ratios],
                           "ratios": ratios, "stopped_bitwise_at": None}
                    for name, ratios in pairs.items()}, **more}


def test_a_ratio_of_exactly_the_multiple_is_within_the_band():
  result = verdicts.lockstep(_checks({"pmap~reference": [10.0, 1.0]},
                                           port_runs=()))[0]
  assert result["verdict"] == "close" and result["first_fail_step"] is None
  assert result["flip_steps"] == []  # not over the band, so no flip


def test_a_port_run_witnessed_at_exactly_the_multiple_is_excused():
  checks = _checks({"jit~reference": [1.0] * 19 + [90.0]},
                   witness_ratios={"jit": [0.0] * 19 + [10.0]})
  assert verdicts.lockstep(checks)[0]["flip_steps"] == [20]
  # Nudged retakes alone (no pmap run to witness) excuse it too.
  checks = _checks({"jit~reference": [1.0] * 19 + [90.0]},
                   nudged_ratios={"jit": [None] * 19 + [1.0]})
  assert verdicts.lockstep(checks)[0]["flip_steps"] == [20]


def test_an_unwitnessed_port_run_on_the_pairs_right_is_never_excused():
  checks = _checks({"reference~jit": [1.0] * 19 + [90.0]})
  result = verdicts.lockstep(checks)[0]
  assert result["verdict"] == "differ" and result["flip_steps"] == []


def test_the_step_metrics_entry_holds_each_largest_gap_and_the_first_fail():
  checks = _checks({"pmap~reference": [0.0, 0.0, 0.0]}, port_runs=(),
                   metric_band={"loss": 1e-4})
  checks["pairs"]["pmap~reference"]["metric_gaps"] = [
      {"loss": [1e-4, 1.0], "lr": [0.0, 1e-3]},
      {"loss": [5e-4, 1.0]}, {"loss": [2e-3, 1.0], "lr": [0.0, 1e-3]}]
  result = verdicts.lockstep(checks)[0]
  # Loss's allowed gap is 10x its own band (1e-3), not METRIC_RTOL.
  assert result["metric_max_gap"] == {"loss": pytest.approx(2e-3),
                                      "lr": 0.0}
  assert result["metric_fail"] == {"step": 3, "metric": "loss",
                                   "gap": pytest.approx(2e-3),
                                   "allowed": pytest.approx(1e-3)}
  at_edge = _checks({"pmap~reference": [0.0]}, port_runs=())
  at_edge["pairs"]["pmap~reference"]["metric_gaps"] = [
      {"loss": [verdicts.METRIC_RTOL, 1.0]}]
  assert verdicts.lockstep(at_edge)[0]["metric_fail"] is None


def test_the_lockstep_entry_in_full():
  # Two steps over: more than one flip in 3 checked steps can explain.
  checks = _checks({"pmap~reference": [2.0, 40.0, 30.0]}, port_runs=(),
                   judged_leaves=["w"], leaves=["w", "b"],
                   unjudged_leaves={"b": 0.5})
  checks["pairs"]["pmap~reference"]["stopped_bitwise_at"] = 4
  result = verdicts.lockstep(checks)[0]
  assert result == {
      "a": "pmap", "b": "reference", "at": "lockstep", "verdict": "differ",
      "max_error": pytest.approx(40e-5), "max_ratio": 40.0,
      "worst_step": 2, "first_fail_step": 2, "first_fail_ratio": 40.0,
      # No leaf named per step: none is named at the failure.
      "first_fail_leaf": "", "flip_steps": [], "metric_max_gap": {},
      "metric_fail": None, "allowed_ratio": 10.0, "judged_leaves": ["w"],
      "leaves": ["w", "b"], "unjudged_leaves": {"b": 0.5},
      "stopped_bitwise_at": 4}
  bare = verdicts.lockstep(_checks({"pmap~reference": [0.5]},
                                         port_runs=()))[0]
  assert (bare["judged_leaves"], bare["leaves"], bare["unjudged_leaves"]) == (
      None, None, {})
  assert bare["max_ratio"] == 0.5  # within its band: under 1, as measured


def test_a_step_no_run_took_is_no_error_and_no_ratio():
  # A step a pair did not take (None) is NaN to the verdict: never over.
  checks = _checks({"pmap~reference": [2.0, None, 40.0]}, port_runs=("pmap",))
  result = verdicts.lockstep(checks)[0]
  assert result["verdict"] == "differ" and result["first_fail_step"] == 3


def test_each_metrics_largest_gap_is_over_every_step_not_the_last():
  checks = _checks({"pmap~reference": [0.0, 0.0]}, port_runs=())
  checks["pairs"]["pmap~reference"]["metric_gaps"] = [
      {"loss": [5e-5, 1.0]}, {"loss": [1e-5, 1.0]}]
  result = verdicts.lockstep(checks)[0]
  assert result["metric_max_gap"] == {"loss": pytest.approx(5e-5)}
