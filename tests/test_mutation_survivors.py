"""The prover's small rules that mutation testing (`python -m
bench.mutation`) found no fast test pinning: leaf_bands' bands and scores,
lockstep's plan of checked steps, its flip limit and a run's skeleton.
Each test names the behaviour; bench/mutation/triage.toml the mutants."""

import jax
import numpy as np
import pytest

from compare._src.prove import leaf_bands
from compare._src.prove import lockstep
from compare._src.prove import placement


# leaf_bands: a leaf's band and a step's score (bench/mutation/triage.toml).


def test_a_leaf_a_calibration_step_left_bitwise_counts_as_zero_in_its_band():
  seen = {}

  def band_of(errors):
    seen["w"] = errors
    return max(errors), []

  leaf_bands.bands([{"w": 1e-4}, {}], band_of, 1e-6)
  assert seen["w"] == [1e-4, 0.0]


def test_each_leafs_rounding_flips_are_kept_under_flips_by_step_index():
  judged = leaf_bands.bands([{"w": 1e-4}, {"w": 2e-4}],
                            lambda errors: (max(errors), [1]), 1e-6)
  assert judged["flips"] == {"w": [1]}
  clean = leaf_bands.bands([{"w": 1e-4}], lambda e: (max(e), []), 1e-6)
  assert clean["flips"] == {}


def test_a_step_not_taken_scores_none_at_no_leaf():
  judged = leaf_bands.bands([{"w": 1e-4}], lambda e: (max(e), []), 1e-6)
  assert leaf_bands.score(None, judged) == (None, "")


def test_a_step_with_no_errors_scores_zero_at_no_leaf():
  judged = leaf_bands.bands([{"w": 1e-4}], lambda e: (max(e), []), 1e-6)
  assert leaf_bands.score({}, judged) == (0.0, "")


def test_the_score_names_the_worst_leaf_and_the_first_of_equals():
  judged = leaf_bands.bands([{"a": 1e-4, "b": 1e-4}],
                            lambda e: (max(e), []), 1e-6)
  assert leaf_bands.score({"a": 2e-4, "b": 5e-5}, judged) == (
      pytest.approx(2.0), "a")
  assert leaf_bands.score({"a": 5e-5, "b": 2e-4}, judged) == (
      pytest.approx(2.0), "b")
  assert leaf_bands.score({"a": 1e-4, "b": 1e-4}, judged)[1] == "a"
  assert leaf_bands.score({"a": 0.0, "b": 0.0}, judged) == (0.0, "a")


def test_bands_while_the_run_goes_on_are_each_leafs_median_so_far():
  floor = 1e-6
  assert leaf_bands.so_far([], floor) == {
      "bands": {}, "unjudged": {}, "band": floor, "floor": floor,
      "flips": {}}
  so_far = leaf_bands.so_far(
      [{"w": 1e-4, "b": 1e-5}, {"w": 3e-4}, {"w": 2e-4, "b": 1e-5}], floor)
  # b's median counts the step that left it bitwise as 0: 1e-5, not its
  # mean; the sibling floor (0.3 of w's 2e-4) lifts it to 6e-5.
  assert so_far["band"] == pytest.approx(2e-4)
  assert so_far["bands"] == {"w": pytest.approx(2e-4),
                             "b": pytest.approx(6e-5)}
  assert so_far["floor"] == pytest.approx(6e-5)
  assert so_far["unjudged"] == {} and so_far["flips"] == {}
  loud = leaf_bands.so_far([{"w": 1e-4, "n": 1.0}], floor)
  assert loud["unjudged"] == {"n": 1.0} and "n" not in loud["bands"]


# lockstep: which steps are checked, the flip limit, a run's skeleton.


# pylint: disable=protected-access
def _lockstep(check_every, steps):
  checks = object.__new__(lockstep.Lockstep)  # no runs: the plan alone
  checks.check_every, checks.steps = check_every, steps
  return checks


def test_step_1_every_nth_step_and_the_last_are_checked():
  checks = _lockstep(10, 25)
  assert [t for t in range(1, 26) if checks.is_checked(t)] == [1, 10, 20, 25]
  assert checks._planned_checks() == 4
  assert not any(_lockstep(None, 5).is_checked(t) for t in range(1, 6))
  assert _lockstep(1, 3)._planned_checks() == 3


def test_two_programs_may_part_at_one_checked_step_or_5_percent():
  assert [lockstep.flip_limit(n) for n in (0, 1, 19, 20, 39, 40, 200)] == [
      1, 1, 1, 1, 1, 2, 10]


def test_a_runs_skeleton_keeps_small_leaves_whole_and_large_ones_shaped():
  small = jax.numpy.arange(placement.SKELETON_MAX_SIZE, dtype=np.float32)
  large = jax.numpy.zeros(placement.SKELETON_MAX_SIZE + 1, np.float32)
  kept = lockstep.skeleton({"small": small, "large": large, "n": 3})
  assert isinstance(kept["small"], jax.Array) and kept["small"] is not small
  np.testing.assert_array_equal(kept["small"], small)
  assert kept["large"] == jax.ShapeDtypeStruct(
      large.shape, large.dtype, sharding=large.sharding)
  assert kept["n"] == 3


def test_the_calibrations_flips_are_left_out_largest_first_up_to_the_limit():
  # 40 checked steps may hold 2 flips: both left out, the band the rest.
  per_step = [1e-5] * 38 + [0.5, 0.4]
  assert lockstep.band_of(per_step) == (1e-5, [38, 39])


def test_a_flip_is_over_10x_the_median_and_at_least_1e_3():
  m = 2.0 ** -10  # 10 m is exact: at the multiple, not over it
  assert lockstep.band_of([m, m, 10 * m]) == (10 * m, [])
  # At the level itself a step is a flip (the level is inclusive).
  assert lockstep.band_of([1e-6, 1e-6, 1e-3]) == (1e-6, [2])
  assert lockstep.band_of([1e-6, 1e-6, 9e-4]) == (9e-4, [])
