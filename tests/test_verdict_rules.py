"""The verdicts' rules on made-up checks, no run: lockstep's band and its
rounding-flip rule, the step metrics, the end's shared-state evaluation
and the calibration runs' spread (`compare._src.prove.verdicts`). The runs that show
them on real programs are in tests/test_verdict.py.
"""

import numpy as np
import pytest

from compare._src.prove import equivalence
from compare._src.prove import leaf_bands
from compare._src.prove import lockstep
from shardport import strategies
from compare._src.prove import verdicts


def _in_bands(errors, band):
  """Errors of a state with one leaf, as the verdict reads them: ratios to
  that leaf's band (`compare._src.prove.leaf_bands`)."""
  return [None if e is None else e / band for e in errors]


def _pair(errors, band):
  return {"errors": errors, "ratios": _in_bands(errors, band),
          "stopped_bitwise_at": None}


def _checks(errors, band=1e-5, multiple=10.0):
  return {"multiple": multiple, "band": band, "checked_steps": len(errors),
          "steps": list(range(1, len(errors) + 1)),
          "pairs": {"a~b": _pair(errors, band)}}


@pytest.mark.parametrize("errors, verdict, first", [
    ([0.0, 0.0, 0.0], "bitwise", None),
    ([2e-5, 9e-5, 1e-5], "close", None),
    # One step at 1% of the update (a branch ported wrongly, taken once):
    # nothing before or after excuses it.
    ([2e-5, 1e-2, 1e-5], "differ", 2),
    # A jump from within the band at the last step (what the old flip rule
    # excused): caught at its step.
    ([1e-5, 1e-5, 4e-4], "differ", 3),
])
def test_lockstep_verdict_names_the_first_step_over_the_band(errors, verdict,
                                                             first):
  result = verdicts.lockstep(_checks(errors))[0]
  assert result["verdict"] == verdict
  assert result["first_fail_step"] == first
  failure = verdicts.first_failure([result])
  assert (failure is None) == (first is None)
  if first:
    assert failure.startswith(f"first at step {first}: a vs b")


def test_no_lockstep_verdict_without_checks():
  assert verdicts.lockstep(_checks([])) == []


@pytest.mark.parametrize("per_step, band, left_out", [
    # One calibration step took another branch (examples/resnet, step 28):
    # left out, the next largest is the band.
    ([1e-5] * 27 + [6.6e-3, 2e-5, 2.4e-4], 2.4e-4, [27]),
    # At most `flip_limit` (1 of 30 steps): the second outlier stays.
    ([1e-5] * 28 + [6.6e-3, 5e-3], 5e-3, [28]),
    # Up to 10x the median is summation order, kept.
    ([1e-5] * 9 + [9e-5], 9e-5, []),
    # Far over the median but too small to hide a 1% mistake (random data's
    # long tail): kept.
    ([1e-5] * 197 + [1.2e-4, 2e-4, 3.8e-4], 3.8e-4, []),
    # Two steps have no median to stand over: both kept.
    ([1e-5, 6.6e-3], 6.6e-3, []),
    # Below the floor, the floor.
    ([1e-8, 1e-8, 5e-7], lockstep.BAND_FLOOR, []),
])
def test_a_calibration_flip_is_left_out_of_the_band(per_step, band, left_out):
  assert lockstep.band_of(per_step) == (pytest.approx(band), left_out)


def test_a_one_percent_mistake_at_a_calibration_flips_step_fails_there():
  # The plant the rule exists for: without it the flip's 6.6e-3 makes the
  # allowed error 6.6e-2 and a 1% mistake at the same step passes.
  per_step = [1e-5] * 27 + [6.6e-3, 2e-5, 2.4e-4]
  errors = [1e-5] * 27 + [1.005e-2, 2e-5, 2.4e-4]
  band, _ = lockstep.band_of(per_step)
  result = verdicts.lockstep(_checks(errors, band=band))[0]
  assert result["first_fail_step"] == 28
  lenient = verdicts.lockstep(_checks(errors, band=max(per_step)))[0]
  assert lenient["first_fail_step"] is None  # what the old band let pass


def _witnessed_checks(pairs, witness_errors, steps=10, band=1e-5):
  return {"multiple": 10.0, "band": band, "checked_steps": steps,
          "steps": list(range(1, steps + 1)),
          "port_runs": ["shard_map", "jit"], "witness": "pmap",
          "witness_ratios": {run: _in_bands(errors, band)
                             for run, errors in witness_errors.items()},
          "flip_limit": lockstep.flip_limit(steps),
          "pairs": {name: _pair(errors, band)
                    for name, errors in pairs.items()}}


def _by_pair(results):
  return {f"{r['a']}~{r['b']}": r for r in results}


FLIP = [1e-5] * 9 + [9e-4]  # a rounding flip at step 10: 90x the band


def test_a_flip_between_two_programs_is_excused_where_the_ports_took_pmaps_step():
  checks = _witnessed_checks(
      {"pmap~shard_map": [0.0] * 10, "pmap~reference": FLIP,
       "shard_map~reference": FLIP, "jit~reference": FLIP},
      {"shard_map": [0.0] * 10, "jit": [2e-5] * 10})
  results = _by_pair(verdicts.lockstep(checks))
  for name in ("pmap~reference", "shard_map~reference", "jit~reference"):
    assert results[name]["verdict"] == "close", results[name]
    assert results[name]["flip_steps"] == [10]
  assert verdicts.first_failure(list(results.values())) is None


@pytest.mark.parametrize("late", [1, 5, 10])
def test_a_port_that_left_pmaps_step_is_never_excused(late):
  # The same jump, but jit's step is not pmap's there (a planted mistake,
  # from step 1, mid-run or at the last step): jit~reference fails at it.
  jit = [2e-5] * 10
  jit[late - 1] = 9e-4
  errors = [1e-5] * 10
  errors[late - 1] = 9e-4
  checks = _witnessed_checks({"pmap~reference": [1e-5] * 10,
                              "jit~reference": errors},
                             {"shard_map": [0.0] * 10, "jit": jit})
  results = _by_pair(verdicts.lockstep(checks))
  assert results["jit~reference"]["verdict"] == "differ"
  assert results["jit~reference"]["first_fail_step"] == late
  assert results["jit~reference"]["flip_steps"] == []


def test_a_port_with_no_witness_running_is_judged_strictly():
  checks = _witnessed_checks({"shard_map~reference": FLIP}, {})
  checks["witness"] = None
  result = verdicts.lockstep(checks)[0]
  assert result["verdict"] == "differ" and result["first_fail_step"] == 10


def test_more_flips_than_the_limit_fail_at_the_first():
  # Two programs that part at more checked steps than a rounding flip can
  # explain (one in 10 steps here) are not excused.
  errors = [1e-5] * 7 + [9e-4] * 3
  checks = _witnessed_checks({"pmap~reference": errors},
                             {"shard_map": [0.0] * 10})
  result = verdicts.lockstep(checks)[0]
  assert result["verdict"] == "differ" and result["first_fail_step"] == 8


def test_a_flip_before_a_real_mistake_names_the_mistakes_step():
  errors = [1e-5] * 10
  errors[2], errors[7] = 9e-4, 1e-2
  jit = [2e-5] * 10
  jit[7] = 1e-2
  checks = _witnessed_checks({"jit~reference": errors},
                             {"jit": jit, "shard_map": [0.0] * 10})
  result = verdicts.lockstep(checks)[0]
  assert result["first_fail_step"] == 8 and result["flip_steps"] == [3]


def test_a_flip_no_witness_shares_is_excused_where_a_nudged_retake_matched():
  # The einsum ensemble port's flip: no pmap run took its step, but its step
  # or the truth's, retaken on a batch nudged by a few ulps, matched the
  # other within the band (2.1e-6 there).
  nudged = [None] * 9 + [2e-6]
  checks = _witnessed_checks({"jit~reference": FLIP},
                             {"jit": [2e-5] * 9 + [9e-4]})
  checks["nudged_ratios"] = {"jit": _in_bands(nudged, 1e-5)}
  result = verdicts.lockstep(checks)[0]
  assert result["verdict"] == "close" and result["flip_steps"] == [10]
  # Negative controls: the retakes kept the step apart (a mistake stays in
  # every retake), or no retake was taken: it fails at its step.
  for kept in ([None] * 9 + [8e-4], [None] * 10):
    checks["nudged_ratios"] = {"jit": _in_bands(kept, 1e-5)}
    result = verdicts.lockstep(checks)[0]
    assert result["verdict"] == "differ" and result["first_fail_step"] == 10


def test_nudged_retakes_excuse_no_more_flips_than_the_limit():
  errors = [1e-5] * 7 + [9e-4] * 3
  checks = _witnessed_checks({"jit~reference": errors}, {})
  checks["witness"] = None
  checks["nudged_ratios"] = {"jit": _in_bands([None] * 7 + [1e-6] * 3, 1e-5)}
  result = verdicts.lockstep(checks)[0]
  assert result["verdict"] == "differ" and result["first_fail_step"] == 8


def test_a_step_metric_is_judged_relative_and_an_accuracy_by_one_example():
  def fails(key, a, b):
    checks = _witnessed_checks({"pmap~shard_map": [0.0] * 10},
                               {"shard_map": [0.0] * 10})
    checks["batch_rows"] = 128
    gaps = [{}] * 9 + [equivalence.metric_gaps({key: a}, {key: b})]
    checks["pairs"]["pmap~shard_map"]["metric_gaps"] = gaps
    result = verdicts.lockstep(checks)[0]
    return result["verdict"] == "differ" and (
        result["metric_fail"]["step"] == 10)
  assert not fails("loss", 2.0 * (1 + 5e-6), 2.0)
  # Rounding of a late, small loss: data_parallel's step 633 of 1000 on
  # digits (1.13e-5), which failed the old 1e-5 bound, with headroom.
  assert not fails("loss", 2.0 * (1 + 1.13e-5), 2.0)
  assert not fails("loss", 2.0 * (1 + 9e-5), 2.0)
  assert fails("loss", 2.0 * (1 + 1.25e-3), 2.0)  # device 0 x 1.01 of 8
  assert fails("loss", 2.0 * (1 + 2e-4), 2.0)
  assert not fails("accuracy", 0.5 + 1 / 128, 0.5)
  assert fails("accuracy", 0.5 + 2 / 128, 0.5)


def _final(shared_loss, free_loss=1.0, steps=5):
  strategy = strategies.get("data_parallel")
  host = {"params": {"w": np.ones(3, np.float32)}, "opt_state": ()}
  moved = {"params": {"w": np.full(3, 1.1, np.float32)}, "opt_state": ()}
  calibration = {"drift_per_step": [1e-3, 1e-3],
                 "summaries": [{"test_loss": 1.0, "test_accuracy": 0.9}]}
  summaries = {"reference": {"test_loss": 1.0, "test_accuracy": 0.9},
               "a": {"test_loss": free_loss, "test_accuracy": 0.9},
               "b": {"test_loss": 1.0, "test_accuracy": 0.9}}
  shared = {"a": {"test_loss": shared_loss, "test_accuracy": 0.9},
            "b": {"test_loss": 1.0, "test_accuracy": 0.9}}
  return verdicts.final(strategy, [("a", "b")], {"a": moved, "b": host},
                        {"a~b": [2e-3, 7e-3]}, calibration, summaries, 100,
                        shared, steps)[0]


def test_final_verdict_judges_the_shared_evaluation_not_the_free_runs():
  # Free-running metrics far outside the calibration spread (what two
  # devices' chaos does to a correct port) and drift 7x the band are
  # shown, not judged.
  result = _final(1.0, free_loss=1.5)
  assert result["verdict"] == "close"
  assert result["calibration"]["max_ratio"] == pytest.approx(7.0)
  assert not result["calibration"]["metrics"]["test_loss"]["within"]
  assert result["calibration"]["judged"] is False
  # Rounding of one state's evaluation passes; 1% of the loss fails, and
  # the verdict names the step, the metric and the gap.
  assert _final(1.0 + 5e-6)["verdict"] == "close"
  result = _final(1.01)
  assert result["verdict"] == "differ"
  failure = verdicts.first_failure([result])
  assert failure.startswith("at the end, step 5: a and b evaluate the same "
                            "state differently: test_loss 1.01 vs 1"), failure


def test_shared_accuracy_may_differ_by_one_test_example_only():
  def verdict(accuracy):
    shared = {"a": {"test_accuracy": accuracy}, "b": {"test_accuracy": 0.9}}
    return verdicts._shared_check(  # pylint: disable=protected-access
        shared, "a", "b", 100, ("test_accuracy",))["test_accuracy"]["within"]
  assert verdict(0.91) and not verdict(0.92)


def test_metric_spread_is_the_widest_calibration_runs():
  strategy = strategies.get("data_parallel")
  host = {"params": {"w": np.ones(3, np.float32)}, "opt_state": ()}
  moved = {"params": {"w": np.full(3, 1.001, np.float32)}, "opt_state": ()}
  summaries = {"reference": {"test_loss": 1.0, "test_accuracy": 0.9},
               "a": {"test_loss": 1.2, "test_accuracy": 0.9},
               "b": {"test_loss": 1.0, "test_accuracy": 0.9}}

  def within(*losses):
    calibration = {"drift_per_step": [1e-2], "summaries": [
        {"test_loss": loss, "test_accuracy": 0.9} for loss in losses]}
    result = verdicts.final(strategy, [("a", "b")], {"a": moved, "b": host},
                            {"a~b": [1e-3]}, calibration, summaries, 100)[0]
    assert result["verdict"] == "close"  # shown, never judged
    return result["calibration"]["metrics"]["test_loss"]["within"]

  # A test-loss gap of 0.2: within 3x of one calibration run's 0.1 spread,
  # whichever run it is; beyond 3x of the 1% floor when none moved.
  assert within(1.0, 1.1, 1.0) and within(1.1, 1.0, 1.0)
  assert not within(1.0, 1.0, 1.0)


# Per-leaf bands (`compare._src.prove.leaf_bands`): examples/team_programs'
# linen_conv_bn, whose convolution bias before BatchNorm has no true
# gradient: its calibration errors are about its whole update.
NOISY, KERNEL = "['params']['Conv_0']['bias'] (16,)", "['params']['Dense_0']['kernel'] (16, 10)"


def _leaf_checks(pair_errors, calibration):
  """A lockstep report over leaves, as `Lockstep.report` builds it."""
  judged = leaf_bands.bands(calibration, lockstep.band_of, lockstep.BAND_FLOOR)
  return {"multiple": 10.0, "band": judged["band"],
          "checked_steps": len(pair_errors),
          "steps": list(range(1, len(pair_errors) + 1)),
          "pairs": {"port~pmap": {
              "errors": [max(e.values(), default=0.0) for e in pair_errors],
              "ratios": [leaf_bands.score(e, judged)[0] for e in pair_errors],
              "leaves": [leaf_bands.score(e, judged)[1] for e in pair_errors],
              "stopped_bitwise_at": None}}}, judged


CALIBRATION = [{NOISY: 1.2, KERNEL: 2e-6}, {NOISY: 0.9, KERNEL: 3e-6},
               {NOISY: 1.1, KERNEL: 1e-6}]


def test_a_noisy_leaf_loosens_only_itself():
  plant = [{NOISY: 1.0, KERNEL: 2e-6}, {NOISY: 0.8, KERNEL: 1e-2},
           {NOISY: 1.0, KERNEL: 1e-2}]  # 1% of the update from step 2
  checks, judged = _leaf_checks(plant, CALIBRATION)
  assert judged["unjudged"] == {NOISY: 1.2}
  assert judged["bands"] == {KERNEL: pytest.approx(3e-6)}
  result = verdicts.lockstep(checks)[0]
  assert result["verdict"] == "differ" and result["first_fail_step"] == 2
  assert result["first_fail_leaf"] == KERNEL
  # Negative control: one band over the whole state (the noisy leaf's, 1.2)
  # lets the same plant through, as it did before.
  whole = _checks([max(e.values()) for e in plant], band=1.2)
  assert verdicts.lockstep(whole)[0]["verdict"] == "close"


def test_rounding_in_every_leaf_passes_and_the_noisy_leaf_is_not_judged():
  correct = [{NOISY: 1.3, KERNEL: 2.5e-6}, {NOISY: 5.0, KERNEL: 2.9e-5},
             {NOISY: 0.7}]
  checks, _ = _leaf_checks(correct, CALIBRATION)
  assert verdicts.lockstep(checks)[0]["verdict"] == "close"


def test_a_leaf_no_calibration_moved_is_judged_against_its_siblings_share():
  quiet = "['params']['Dense_0']['bias'] (10,)"
  judged = leaf_bands.bands(CALIBRATION, lockstep.band_of,
                            lockstep.BAND_FLOOR)
  # Rounding on it within the floor passes; a 1% mistake on it alone fails.
  assert judged["floor"] == pytest.approx(lockstep.BAND_FLOOR)
  assert leaf_bands.score({quiet: 5e-6}, judged)[0] <= 10
  assert leaf_bands.score({quiet: 1e-2}, judged) == (pytest.approx(1e4),
                                                      quiet)
  # With judged siblings just under `UNJUDGEABLE`, the floor is just under
  # 1e-3: a 1% mistake on the quiet leaf is still over the multiple.
  loud = leaf_bands.bands([{KERNEL: 0.99 * leaf_bands.UNJUDGEABLE}],
                          lockstep.band_of, lockstep.BAND_FLOOR)
  assert loud["floor"] == pytest.approx(
      leaf_bands.SIBLING_SHARE * 0.99 * leaf_bands.UNJUDGEABLE)
  assert leaf_bands.score({quiet: 1e-2}, loud)[0] > 10


def test_a_leaf_at_the_unjudgeable_share_is_named_and_not_judged():
  judged = leaf_bands.bands([{KERNEL: leaf_bands.UNJUDGEABLE}],
                            lockstep.band_of, lockstep.BAND_FLOOR)
  assert KERNEL in judged["unjudged"] and judged["bands"] == {}
  just_under = leaf_bands.bands([{KERNEL: 0.99 * leaf_bands.UNJUDGEABLE}],
                                lockstep.band_of, lockstep.BAND_FLOOR)
  assert KERNEL in just_under["bands"]


@pytest.mark.parametrize("wrong", ["accuracy", "grad_norm", "loss"])
def test_every_metric_of_a_step_is_compared_wherever_it_lies(wrong):
  right = {"loss": 2.3, "accuracy": 0.5, "grad_norm": 1.7}
  planted = {**right, wrong: right[wrong] * 1.01}
  gaps = equivalence.metric_gaps(planted, right)
  assert sorted(gaps) == sorted(right)
  assert [key for key, (gap, _) in gaps.items() if gap] == [wrong]


def test_a_tuple_of_metrics_keeps_every_one():
  from compare._src.prove import adapt  # pylint: disable=g-import-not-at-top
  assert adapt.metrics_dict((1.0, 2.0, 3.0)) == {
      "loss": 1.0, "metric_1": 2.0, "metric_2": 3.0}


def test_a_nudged_retake_moves_the_batch_by_rounding_only():
  # The retakes may excuse a flip only because they change nothing but
  # rounding: each float moved by at most 8 ulps of float32 (1e-6 of it).
  # A wider nudge (a 262144-ulp one moves a float by 3%) would let a retake
  # of the truth meet a 1% mistake.
  from shardport.strategies import perturbations  # pylint: disable=g-import-not-at-top
  x = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
  for i, ulps in enumerate(lockstep.NUDGE_ULPS):
    moved = perturbations.nudged_by({"x": x}, ulps, seed=(1, i))["x"]
    assert 0 < np.abs(moved - x).max()
    assert np.max(np.abs(moved - x) / np.abs(x)) <= 1e-6
