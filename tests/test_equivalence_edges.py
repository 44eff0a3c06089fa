"""The comparisons under every verdict, at their edges, no run: a step's
errors as fractions of its update, the drift's largest difference, the
step metrics' gaps, a leaf's statistics and the distance in ulps
(`compare._src.prove.equivalence`). Written for the survivors of `python -m
bench.mutation` (bench/mutation/triage.toml)."""

import numpy as np
import pytest

from compare._src.prove import equivalence
from shardport.strategies import tolerances

# pylint: disable=protected-access
F32 = np.float32


def _state(w, b, step=3):
  return {"params": {"w": F32(w), "b": F32(b)},
          "opt_state": {"count": np.int32(step)}}


def test_a_steps_errors_are_fractions_of_each_leafs_own_update():
  start = _state([0.0, 0.0], [0.0])
  truth = _state([1.0, -2.0], [0.5])
  port = _state([1.0, -2.02], [0.5])
  assert equivalence.update_errors(port, truth, start) == {
      "['params']['w'] (2,)": pytest.approx(0.01)}
  assert equivalence.update_errors(truth, truth, start) == {}


def test_a_leaf_that_barely_moved_is_judged_against_its_collections_floor():
  start = _state([0.0, 0.0], [1.0])
  truth = _state([1.0, -4.0], [1.0])  # b did not move: floor 1e-3 * 4
  port = _state([1.0, -4.0], [1.0 + 2 ** -10])
  errors = equivalence.update_errors(port, truth, start)
  assert errors == {"['params']['b'] (1,)": pytest.approx(
      2 ** -10 / (equivalence.UPDATE_FLOOR * 4.0))}
  # A whole collection that did not move: no division by zero.
  still = _state([1.0, 1.0], [1.0])
  error = equivalence.update_errors(_state([1.0, 1.0], [1.5]), still,
                                    still)["['params']['b'] (1,)"]
  assert 1e300 < error < float("inf")


def test_a_differing_step_counter_or_a_non_finite_value_is_infinite():
  start = _state([0.0, 0.0], [0.0])
  truth = _state([1.0, 1.0], [1.0])
  counter = equivalence.update_errors(_state([1.0, 1.0], [1.0], step=4),
                                      truth, start)
  assert counter == {"['opt_state']['count'] ()": float("inf")}
  nan = equivalence.update_errors(_state([1.0, np.nan], [1.0]), truth,
                                  start)
  assert nan == {"['params']['w'] (2,)": float("inf")}


def test_the_update_of_a_non_float_leaf_is_zero_and_of_a_float_its_largest():
  assert equivalence._update(np.int32(5), np.int32(3)) == 0.0
  assert equivalence._update(F32([1.0, -3.0]), F32([0.5, 0.0])) == 3.0
  assert equivalence._update(F32([]), F32([])) == 0.0


def test_the_drifts_difference_is_the_largest_over_the_leaves():
  a = {"w": F32([1.0, 2.0]), "n": np.int32(7), "e": F32([])}
  b = {"w": F32([1.5, 2.0]), "n": np.int32(7), "e": F32([])}
  assert equivalence.max_abs_difference(a, b) == 0.5
  assert equivalence.max_abs_difference(a, a) == 0.0
  assert equivalence.max_abs_difference({}, {}) == 0.0
  nan = {"w": F32([1.0, np.nan]), "n": np.int32(7), "e": F32([])}
  assert equivalence.max_abs_difference(nan, b) == float("inf")
  assert equivalence.max_abs_difference(nan, nan) == 0.0  # same bits


def test_trees_of_the_same_bits_and_finite_trees():
  a = {"w": F32([1.0, np.nan]), "n": np.int32(7)}
  assert equivalence.trees_same_bits(a, {"w": F32([1.0, np.nan]),
                                         "n": np.int32(7)})
  assert not equivalence.trees_same_bits(a, {"w": F32([1.0, np.nan]),
                                             "n": np.int32(8)})
  assert not equivalence.all_finite(a)
  assert equivalence.all_finite({"w": F32([1.0]), "n": np.int32(7)})
  assert not equivalence.all_finite({"w": F32([np.inf])})


def test_the_step_metrics_gaps_are_each_largest_difference_and_magnitude():
  gaps = equivalence.metric_gaps(
      {"loss": 2.0, "acc": F32([0.5, 0.25]), "lr": 1e-3, "nan": np.nan,
       "shape": F32([1.0, 2.0]), "only_a": 1.0},
      {"loss": 2.5, "acc": F32([0.5, -0.75]), "lr": 1e-3, "nan": 1.0,
       "shape": F32([1.0]), "only_b": 1.0})
  assert gaps == {"acc": [1.0, 0.75], "loss": [0.5, 2.5], "lr": [0.0, 1e-3],
                  "nan": [float("inf"), 1.0], "shape": [float("inf"), 1.0]}
  assert list(gaps) == sorted(gaps)
  assert equivalence.metric_gaps({"e": F32([])}, {"e": F32([])}) == {
      "e": [0.0, 0.0]}
  assert equivalence.relative_gap([0.5, 2.5]) == 0.2
  assert equivalence.relative_gap([0.0, 0.0]) == 0.0
  assert equivalence.relative_gap([1.0, 0.0]) > 1e300


def test_a_leafs_statistics_and_tolerance():
  tol = tolerances.Tolerance(rtol=1e-2, atol=1e-3)
  stats = equivalence._leaf_stats(
      F32([1.0, -100.0, 0.0]), F32([1.005, -100.0, 0.1]), tol)
  # atol is of the leaf's largest (100): 0.1 allowed at 0.0.
  assert stats["bitwise"] is False and stats["close"] is True
  assert stats["max_abs"] == pytest.approx(0.1, rel=1e-6)
  assert stats["max_rel"] == pytest.approx(1.0)
  assert stats["max_ulp"] > 0
  edge = equivalence._leaf_stats(F32([1.0]), F32([2.0]),
                                 tolerances.Tolerance(rtol=0.5, atol=0.0))
  assert edge["close"] is True  # a difference of exactly what is allowed
  nan = equivalence._leaf_stats(F32([np.nan, 1.0]), F32([1.0, 1.0]), tol)
  assert (nan["close"], nan["max_abs"], nan["max_rel"]) == (
      False, float("inf"), float("inf"))
  zero = equivalence._leaf_stats(F32([1e-3]), F32([0.0]), tol)
  assert zero["max_rel"] == pytest.approx(1e-3 / 1e-30, rel=1e-6)
  same = equivalence._leaf_stats(F32([1.0, np.nan]), F32([1.0, np.nan]), tol)
  assert same == {"bitwise": True, "close": True, "max_abs": 0.0,
                  "max_rel": 0.0, "max_ulp": 0}
  empty = equivalence._leaf_stats(F32([]), F32([]), tol)
  assert (empty["max_abs"], empty["max_rel"], empty["max_ulp"]) == (
      0.0, 0.0, 0)
  # Empty leaves of two dtypes are not the same bits: computed, no crash.
  empties = equivalence._leaf_stats(F32([]), np.zeros(0, np.float64), tol)
  assert empties == {"bitwise": False, "close": True, "max_abs": 0.0,
                     "max_rel": 0.0, "max_ulp": 0}
  # -0.0 and +0.0: other bits, no ulp between them.
  signed = equivalence._leaf_stats(F32([-0.0]), F32([0.0]), tol)
  assert signed == {"bitwise": False, "close": True, "max_abs": 0.0,
                    "max_rel": 0.0, "max_ulp": 0}


def test_ulps_of_each_float_width_and_across_zero():
  for dtype in (np.float16, np.float32, np.float64):
    one = np.array([1.0], dtype)
    assert equivalence.ulp_distance(one, np.nextafter(one, 2 * one)) == [1]
    zero, tiny = np.array([0.0], dtype), np.array([-0.0], dtype)
    assert equivalence.ulp_distance(zero, tiny) == [0]  # -0 and +0
    below = np.nextafter(zero, -one)
    assert equivalence.ulp_distance(below, np.nextafter(zero, one)) == [2]
  assert equivalence.ulp_distance(np.int32([3, -2]),
                                  np.int32([5, 2])).tolist() == [2, 4]
  # Integers are counted exactly, past float64's 2**53 too.
  big = equivalence.ulp_distance(np.int64([2 ** 62 + 1]), np.int64([2 ** 62]))
  assert big.dtype == np.int64 and big.tolist() == [1]
  big = equivalence.ulp_distance(np.int64([2 ** 62]), np.int64([2 ** 62 + 1]))
  assert big.dtype == np.int64 and big.tolist() == [1]


def test_the_worst_leaf_is_named_and_an_empty_tree_compares_bitwise():
  tol = tolerances.Tolerance(rtol=1e-2, atol=1e-3)
  result = equivalence.compare_trees({"a": F32([1.0]), "b": F32([5.0])},
                                     {"a": F32([1.5]), "b": F32([5.0])}, tol)
  assert result["worst"] == "['a']" and result["verdict"] == "differ"
  empty = equivalence.compare_trees({}, {}, tol)
  assert (empty["verdict"], empty["worst"], empty["max_abs"]) == (
      "bitwise", "", 0.0)


def test_every_leaf_of_a_collection_is_judged_after_a_differing_counter():
  start = {"params": {"w": F32([0.0])}, "empty": (),
           "opt_state": {"count": np.int32(1), "mu": F32([0.0])}}
  truth = {"params": {"w": F32([1.0])}, "empty": (),
           "opt_state": {"count": np.int32(2), "mu": F32([1.0])}}
  port = {"params": {"w": F32([1.0])}, "empty": (),
          "opt_state": {"count": np.int32(3), "mu": F32([1.5])}}
  assert equivalence.update_errors(port, truth, start) == {
      "['opt_state']['count'] ()": float("inf"),
      "['opt_state']['mu'] (1,)": pytest.approx(0.5)}


def test_empty_leaves_of_two_dtypes_differ_by_nothing():
  empty32, empty64 = F32([]), np.zeros(0, np.float64)
  assert equivalence.max_abs_difference({"e": empty32}, {"e": empty64}) == 0.0
  assert equivalence.metric_gaps({"e": empty32}, {"e": empty64}) == {
      "e": [0.0, 0.0]}


def test_a_metric_both_steps_report_as_nan_is_no_gap():
  gaps = equivalence.metric_gaps({"n": F32([np.nan, 1.0])},
                                 {"n": F32([np.nan, 1.0])})
  assert gaps["n"][0] == 0.0


def test_a_leaf_that_is_no_number_is_not_asked_to_be_finite():
  assert equivalence.all_finite({"w": F32([1.0]), "name": "adam"})


def test_compare_trees_in_full():
  tol = tolerances.Tolerance(rtol=1e-2, atol=0.0)
  assert equivalence.compare_trees({"a": F32([1.0, 2.0])},
                                   {"a": F32([1.0, 2.01])}, tol) == {
      "verdict": "close", "max_abs": pytest.approx(0.01, rel=1e-4),
      "max_rel": pytest.approx(0.01 / 2.01, rel=1e-4),
      "max_ulp": 41943, "rtol": 1e-2, "atol": 0.0, "worst": "['a']"}
  assert equivalence.compare_trees({}, {}, tol) == {
      "verdict": "bitwise", "max_abs": 0.0, "max_rel": 0.0, "max_ulp": 0,
      "rtol": 1e-2, "atol": 0.0, "worst": ""}
  with pytest.raises(ValueError, match="trees differ: 1 vs 2 leaves"):
    equivalence.compare_trees({"a": F32([1.0])},
                              {"a": F32([1.0]), "b": F32([1.0])}, tol)
