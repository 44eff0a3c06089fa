"""The verdicts in words, on made-up entries, no run: what `first_failure`
says for each kind of failure and which it names first, the handover's and
the first step's entries, and the overall verdict
(`compare._src.prove.verdicts`). Written for the survivors of
`python -m bench.mutation` (bench/mutation/triage.toml)."""

import types

import numpy as np
import pytest

from compare._src.prove import equivalence
from compare._src.prove import verdicts
from shardport.strategies import tolerances

SWITCH = {"a": "shard_map", "b": "pmap", "at": "switch", "step": 5,
          "verdict": "differ"}
FIRST_BANDED = {"a": "jit", "b": "pmap", "at": "first_step",
                "verdict": "differ", "band_ratio": 123.456,
                "allowed_ratio": 10.0, "band_leaf": "['params']['w']",
                "worst": "['params']['b']"}
FIRST_TOLERANCE = {"a": "jit", "b": "pmap", "at": "first_step",
                   "verdict": "differ", "max_abs": 0.00123,
                   "worst": "['params']['w']", "rtol": 1e-5, "atol": 1e-6}


def _lockstep(a, step, ratio=55.5, leaf="['params']['w']", metric=None):
  return {"a": a, "b": "reference", "at": "lockstep", "verdict": "differ",
          "first_fail_step": step, "first_fail_ratio": ratio,
          "allowed_ratio": 10.0, "first_fail_leaf": leaf,
          "metric_fail": metric}


def _end(metrics):
  return {"a": "jit", "b": "pmap", "at": "final", "verdict": "differ",
          "shared_eval": {"step": 200, "metrics": metrics}}


WITHIN = {"a": 0.5, "b": 0.5, "gap": 0.0, "allowed": 1e-5, "within": True}
APART = {"a": 0.25, "b": 0.2625, "gap": 0.0125, "allowed": 0.001,
         "within": False}


def test_a_switch_that_changed_the_state_is_named_before_anything_else():
  assert verdicts.first_failure([FIRST_BANDED, SWITCH]) == (
      "at the switch, step 5: shard_map restored another state than pmap "
      "saved")
  restored = {**SWITCH, "verdict": "bitwise"}
  assert verdicts.first_failure([restored]) is None


def test_the_first_step_is_named_by_its_band_ratio_and_leaf():
  assert verdicts.first_failure([_lockstep("jit", 2), FIRST_BANDED]) == (
      "first at step 1: jit vs pmap, each from its own initial state, differ "
      "by 123x the one-step band (allowed 10x), most at ['params']['w']")
  no_leaf = {**FIRST_BANDED, "band_leaf": ""}
  assert verdicts.first_failure([no_leaf]).endswith("most at ['params']['b']")


def test_the_first_step_without_checks_is_named_by_its_tolerance():
  assert verdicts.first_failure([FIRST_TOLERANCE]) == (
      "first at step 1: jit vs pmap differ by 0.00123 at ['params']['w'] "
      "(rtol 1e-05, atol 1e-06 of the leaf's largest)")


def test_the_earliest_lockstep_failure_is_named_with_its_ratio_and_leaf():
  late, early = _lockstep("jit", 7), _lockstep("shard_map", 3, leaf="")
  assert verdicts.first_failure([late, early]) == (
      "first at step 3: shard_map vs reference, their steps from the shared "
      "state differ by 55.5x the one-step band (allowed 10x)")
  assert verdicts.first_failure([late]).endswith(
      "(allowed 10x), most at ['params']['w']")


def test_a_metric_reported_wrong_is_named_where_it_comes_first():
  metric = {"step": 4, "metric": "loss", "gap": 0.0125, "allowed": 1e-4}
  only_metric = _lockstep("jit", None, ratio=None, metric=metric)
  assert verdicts.first_failure([_lockstep("pmap", 6), only_metric]) == (
      "first at step 4: jit vs reference, their steps from the shared state "
      "report loss differently (gap 0.0125 of it, allowed 0.0001)")
  # The state parts first: the step's own ratio is named, not the metric.
  both = _lockstep("jit", 2, metric=metric)
  assert "55.5x the one-step band" in verdicts.first_failure([both])


def test_the_end_names_the_first_metric_evaluated_apart():
  assert verdicts.first_failure([_end({"loss": WITHIN,
                                       "accuracy": APART})]) == (
      "at the end, step 200: jit and pmap evaluate the same state "
      "differently: accuracy 0.25 vs 0.2625 (gap 0.0125, allowed 0.001)")
  # A failing step is named before the end.
  assert verdicts.first_failure(
      [_end({"accuracy": APART}), _lockstep("jit", 9)]).startswith(
          "first at step 9:")
  close = {**_end({"accuracy": APART}), "verdict": "close"}
  assert verdicts.first_failure([close]) is None


def test_the_handover_is_judged_by_each_port_runs_restored_digest():
  switched = {"source": "pmap", "step": 40, "source_digest": "abc",
              "restored": {"shard_map": "abc", "jit": "abd"}}
  assert verdicts.handover(switched) == [
      {"a": "shard_map", "b": "pmap", "at": "switch", "step": 40,
       "verdict": "bitwise"},
      {"a": "jit", "b": "pmap", "at": "switch", "step": 40,
       "verdict": "differ"}]
  assert verdicts.handover(None) == [] and verdicts.handover({}) == []


def test_overall_is_diverged_then_fail_then_pass():
  differ, close = {"verdict": "differ"}, {"verdict": "close"}
  assert verdicts.overall([differ], {"jit": 12}) == verdicts.DIVERGED
  assert verdicts.overall([close, differ], {}) == "fail"
  assert verdicts.overall([close, {"verdict": "bitwise"}], {}) == "pass"
  assert verdicts.overall([], {}) == "pass"


STRATEGY = types.SimpleNamespace(tolerances={
    "first_step": tolerances.Tolerance(rtol=1e-3, atol=1e-4)})


def _firsts(moved):
  start = {"w": np.zeros(4, np.float32)}
  truth = {"w": np.ones(4, np.float32)}
  return start, {"pmap": truth, "jit": {"w": truth["w"] + moved}}


def test_without_checks_the_first_step_is_judged_by_its_tolerance():
  _, firsts = _firsts(np.float32(0.5))
  result = verdicts.first_step(STRATEGY, [("jit", "pmap")], firsts)[0]
  assert (result["a"], result["b"], result["at"]) == (
      "jit", "pmap", "first_step")
  assert result["verdict"] == "differ" and "band_ratio" not in result
  _, same = _firsts(np.float32(0.0))
  assert verdicts.first_step(STRATEGY, [("jit", "pmap")],
                             same)[0]["verdict"] == "bitwise"


def _checks(ratios, apart=None):
  """Lockstep checks whose step 1 is the checked steps' first."""
  return {"initial": None, "multiple": 10.0, "steps": [1, 2, 3],
          "checked_steps": 3, "flip_limit": 1, "apart": apart or {},
          "pairs": {"jit~pmap": {"ratios": ratios}},
          "judged": {"bands": {"['w'] (4,)": 1e-3}, "unjudged": {},
                     "floor": 1e-3}}


@pytest.mark.parametrize("moved, ratios, apart, verdict, flips", [
    # Within the band's multiple: close, whatever the tolerance says.
    (5e-3, [0.0, 0.0, 0.0], None, "close", []),
    # Over it, and lockstep's step 1 a flip no plant can explain: excused.
    (0.5, [500.0, 0.0, 0.0], None, "close", [1]),
    # Over it, and lockstep's step 1 within the band: differ.
    (0.5, [0.0, 0.0, 0.0], None, "differ", []),
    # A run that started apart took another step than lockstep's.
    (0.5, [500.0, 0.0, 0.0], {"jit": [1]}, "differ", []),
])
def test_with_checks_the_first_step_is_judged_against_the_band(
    moved, ratios, apart, verdict, flips):
  start, firsts = _firsts(np.float32(moved))
  checks = {**_checks(ratios, apart), "initial": start}
  result = verdicts.first_step(STRATEGY, [("jit", "pmap")], firsts,
                               checks)[0]
  assert result["band_ratio"] == pytest.approx(moved / 1.0 / 1e-3)
  assert result["band_leaf"] == "['w'] (4,)"
  assert result["allowed_ratio"] == 10.0
  assert (result["verdict"], result["flip_steps"]) == (verdict, flips)


def test_with_checks_a_bitwise_first_step_is_bitwise_with_no_band():
  start, same = _firsts(np.float32(0.0))
  result = verdicts.first_step(STRATEGY, [("jit", "pmap")], same,
                               {**_checks([0.0] * 3), "initial": start})[0]
  assert result["verdict"] == "bitwise" and "band_ratio" not in result
  # Measured as the step ran (the runner's way): the same verdict.
  measured = equivalence.compare_pairs([("jit", "pmap")], same,
                                       STRATEGY.tolerances["first_step"],
                                       start)
  assert measured["jit", "pmap"][1] is None
  assert verdicts.first_step(STRATEGY, [("jit", "pmap")], None,
                             _checks([0.0] * 3), measured=measured) == [
                                 result]


def _first(moved, checks):
  start, firsts = _firsts(np.float32(moved))
  return verdicts.first_step(STRATEGY, [("jit", "pmap")], firsts,
                             {**checks, "initial": start})[0]


def test_a_first_step_at_exactly_the_multiple_is_within_the_band():
  checks = _checks([0.0, 0.0, 0.0])
  checks["judged"]["bands"] = {"['w'] (4,)": 0.5}
  result = _first(5.0, checks)  # 5.0 / 1.0 of the update: 10x a 0.5 band
  assert result["band_ratio"] == 10.0 and result["verdict"] == "close"


def test_lockstep_must_have_checked_step_1_and_the_pair_to_excuse_it():
  # Checks that name no run apart and hold no such pair: nothing to excuse.
  checks = _checks([500.0, 0.0, 0.0])
  del checks["apart"], checks["pairs"]
  assert _first(0.5, checks)["verdict"] == "differ"
  # Step 1 is the first of the checked steps wherever the next lie.
  spread = {**_checks([500.0, 0.0, 0.0]), "steps": [1, 10, 20]}
  assert _first(0.5, spread)["flip_steps"] == [1]
  unchecked = {**_checks([500.0, 0.0, 0.0]), "steps": [2, 3, 4]}
  assert _first(0.5, unchecked)["verdict"] == "differ"
