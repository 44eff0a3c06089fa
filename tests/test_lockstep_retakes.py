"""The lockstep checks' nudged retakes, which tell a rounding flip from a
mistake, and their report, driven by fake runs (tests/lockstep_fakes.py):
a flip is excused, a 1% mistake is not; both limits inclusive at the
multiple; the report holds every field of the checks.
"""

import itertools
import types

import numpy as np
import pytest

from compare._src.prove import leaf_bands
from compare._src.prove import lockstep
from shardport.strategies import perturbations
from tests.lockstep_fakes import (
    EPS, ERR, HostLayout, NoFromHost, OFF, ROWS, _batches, _port_step,
    planted_at, world)


# pylint: disable=protected-access


# The nudged retakes that tell a rounding flip from a mistake.


def _flip_at(step, batches):
  """A port whose step `step` is 1% off on that exact batch only: a ReLU
  whose input lies within rounding of zero; a nudge of the batch moves
  it back."""
  original = batches[step - 1]["x"]
  return lambda t, b: OFF if t == step and np.array_equal(
      b["x"], original) else 1.0


def test_no_retake_without_a_multiple():
  checks = world({"port": planted_at(1, 2, 3, 4)}, witness=None,
                 multiple=None).drive()
  assert checks.nudged_errors == {"port": [None] * 4}
  assert checks.extra_steps == 4 + 3  # calibrations; steps from shared


def test_a_correct_port_under_the_multiple_is_not_retaken():
  checks = world({"port": lambda t, b: 1.0 + 2 * EPS * (t == 2)},
                 witness=None).drive()
  assert checks.nudged_errors == {"port": [None] * 4}
  assert checks.extra_steps == 4 + 2  # calibrations; two steps from shared


def test_a_1_percent_mistake_is_retaken_and_stays_over_the_multiple():
  w = world({"port": planted_at(2)}, witness=None, steps=3)
  checks = w.drive()
  nudged = checks.nudged_errors["port"]
  assert nudged[0] is None and nudged[2] is None
  # Each side as taken and on each nudge, paired: 5 x 5.
  assert len(nudged[1]) == (1 + len(lockstep.NUDGE_ULPS)) ** 2
  assert all(0.9e-2 < max(e.values()) < 1.1e-2 for e in nudged[1])
  # Three calibrations, the port's retakes and the truth's.
  assert checks.extra_steps == 3 + 1 + 2 * len(lockstep.NUDGE_ULPS)
  report = checks.report(10.0, "why")
  assert report["nudged_ratios"]["port"][0] is None
  assert report["nudged_ratios"]["port"][1] > 1000


def test_a_rounding_flip_is_excused_by_a_nudged_retake():
  batches = _batches(3)
  w = world({"port": _flip_at(2, batches)}, witness=None, steps=3)
  checks = w.drive()
  assert checks.pairs[("truth", "port")].errors[1] == pytest.approx(
      ERR, rel=1e-6)
  ratios = checks.report(10.0, "why")["nudged_ratios"]["port"]
  assert ratios[0] is None and ratios[2] is None
  assert ratios[1] < 1  # a nudged retake met the truth's step


def test_the_retakes_are_on_the_batch_nudged_by_each_ulps_seeded_by_step():
  batches = _batches(2)
  seen = []

  def scale(t, batch):
    seen.append((t, batch["x"]))
    return OFF if t == 2 else 1.0

  w = world({"port": scale}, witness=None, steps=2)
  w.drive()
  retakes = [x for t, x in seen if t == 2][1:]  # after its own step
  assert len(retakes) == len(lockstep.NUDGE_ULPS)
  for (i, ulps), x in zip(enumerate(lockstep.NUDGE_ULPS), retakes):
    expected = perturbations.nudged_by(batches[1], ulps, seed=(2, i))
    np.testing.assert_array_equal(x, expected["x"])
    assert not np.array_equal(x, batches[1]["x"])
  # Each retake on the port's own rows and devices, from the shared state
  # placed after step 1.
  assert [e for e in w.log if e[1] == "port"] == [
      ("from_host", "port", 1)] * len(lockstep.NUDGE_ULPS)


def test_the_truths_retakes_start_from_its_placed_or_its_kept_state():
  # A truth placed from the host: its calibration at each step and its
  # four retakes at step 2; kept: none.
  placed_truth = ([("from_host", "truth", 0)]
                  + [("from_host", "truth", 1)] * (1 + 4))
  for module, placed in ((HostLayout, placed_truth), (NoFromHost, [])):
    w = world({"port": planted_at(2)}, witness=None, steps=2,
              truth_module=module)
    w.drive()
    truth_placed = [e for e in w.log if e[1] == "truth"]
    assert truth_placed == placed, module
    assert w.rows.count("truth") == 2 + len(lockstep.NUDGE_ULPS)
    ratios = w.checks.report(10.0, "why")["nudged_ratios"]["port"]
    assert ratios[1] > 1000, module  # the truth's retakes are correct


def test_the_truths_retakes_are_taken_once_a_step_for_every_port_run():
  batches = _batches(2)
  w = world({"port": planted_at(2), "flip": _flip_at(2, batches)},
            witness=None, steps=2)
  checks = w.drive()
  # Two calibrations (both ports took their step 2 from the shared state
  # themselves), each port's retakes and the truth's once.
  assert checks.extra_steps == 2 + 3 * len(lockstep.NUDGE_ULPS)
  ratios = checks.report(10.0, "why")["nudged_ratios"]
  assert ratios["port"][1] > 1000 and ratios["flip"][1] < 1
  # Kept for the step only: no retake's host copy outlives it.
  assert checks._truth_nudged == (None, [])


def test_a_runs_retakes_are_compared_as_each_is_taken(monkeypatch):
  # The truth's four retakes are kept for every run's pairings; the run's
  # own are compared as each is taken, one host copy at a time (all ten at
  # once, before: 2.3 GB for a 19M-parameter AdamW state).
  w = world({"port": planted_at(2)}, witness=None, steps=2)
  events = []
  errors = lockstep.equivalence.update_errors
  monkeypatch.setattr(
      lockstep.equivalence, "update_errors",
      lambda a, *rest: events.append(("compared", id(a))) or errors(a, *rest))
  real_steps = w.checks._nudged_steps

  def steps(run, t, host_batch):
    for state in real_steps(run, t, host_batch):
      events.append((f"made {run.name}", id(state)))
      yield state
  monkeypatch.setattr(w.checks, "_nudged_steps", steps)
  w.drive()
  made = [i for i, (what, _) in enumerate(events) if what == "made port"]
  assert len(made) == len(lockstep.NUDGE_ULPS)
  for here, there in zip(made, made[1:] + [len(events)]):
    # Each retake's five pairings (with the truth's step and its four
    # retakes) before the next retake is taken.
    assert events[here + 1:there] == [("compared", events[here][1])] * 5



def test_each_port_runs_retakes_are_its_own_not_the_truths_kept_ones():
  # Two ports 1% off at step 2: the second is retaken after the truth's
  # retakes are kept, and on its own steps it stays 1% off.
  w = world({"first": planted_at(2), "second": planted_at(2)},
            witness=None, steps=2)
  ratios = w.drive().report(10.0, "why")["nudged_ratios"]
  assert ratios["first"][1] > 1000 and ratios["second"][1] > 1000
  assert w.rows.count("first") == w.rows.count("second") == len(
      lockstep.NUDGE_ULPS)


def test_a_run_over_the_band_takes_no_more_retakes_than_the_nudged_limit():
  checks = world({"port": planted_at(*range(1, 5))}, witness=None).drive()
  retaken = [e is not None for e in checks.nudged_errors["port"]]
  # One flip may be excused in 4 checked steps (`nudged_limit`, at least
  # `flip_limit`); one retake more.
  assert retaken == [True, True, False, False]
  many = world({"port": planted_at(*range(1, 41))}, witness=None,
               steps=40).drive()
  retaken = sum(e is not None for e in many.nudged_errors["port"])
  # A quarter of the checked steps may fall back (`NUDGED_SHARE`).
  assert retaken == lockstep.nudged_limit(40) + 1 == 11


def test_a_port_run_that_took_its_witnesss_step_is_not_retaken():
  # pmap made the same 1% step: the two programs agree, nothing to excuse.
  plant = planted_at(2)
  checks = world({"port": plant}, witness_step=plant, steps=2).drive()
  assert checks.nudged_errors["port"] == [None, None]
  # pmap's own step is over the truth's: the witness is retaken, to show
  # whether its parting falls back (it does not: the 1% stays).
  assert checks.nudged_errors["pmap"][0] is None
  assert min(max(e.values()) for e in checks.nudged_errors["pmap"][1]
             ) == pytest.approx(OFF - 1, rel=1e-6)
  assert checks.witness_errors["port"] == [{}, {}]
  # A correct witness: the port is retaken.
  apart = world({"port": plant}, steps=2).drive()
  assert apart.nudged_errors["port"][1] is not None
  assert max(apart.witness_errors["port"][1].values()) == pytest.approx(
      OFF - 1, rel=1e-6)


def _exactly_at(multiple_of, **kwargs):
  """A Lockstep whose multiple is exactly the ratio its first run
  measured with `multiple_of(checks)`: the boundary, inclusive."""
  first = world(**kwargs, multiple=None).drive()
  return world(**kwargs, multiple=multiple_of(first)).drive()


def _ratio(errors, checks):
  return leaf_bands.score(errors, leaf_bands.so_far(
      checks.band_leaves[:1], lockstep.BAND_FLOOR))[0]


def test_a_port_step_exactly_at_the_multiple_is_not_retaken():
  # The port's step is the calibration's: its error is the band itself.
  calibrated = {"port": lambda t, b: 1.0}
  kwargs = {"witness": None, "steps": 1, "pairs": [("port", "truth")]}
  w = world(calibrated, **kwargs)
  w.runs["port"].step = lambda state, batch: _port_step()(
      state, {"x": batch["x"] * (1 + EPS)})
  checks = w.drive()
  assert checks.pairs[("port", "truth")].errors == checks.band
  ratio = _ratio(checks.pairs[("port", "truth")].leaf_errors[0], checks)
  assert ratio == 1.0
  for multiple, retaken in ((1.0, False), (np.nextafter(1.0, 0), True)):
    w = world(calibrated, multiple=multiple, **kwargs)
    w.runs["port"].step = lambda state, batch: _port_step()(
        state, {"x": batch["x"] * (1 + EPS)})
    nudged = w.drive().nudged_errors["port"][0]
    assert (nudged is not None) == retaken, multiple


def test_a_witness_exactly_at_the_multiple_excuses_the_port():
  plant = planted_at(1)
  kwargs = {"ports": {"port": plant}, "steps": 1,
            "witness_step": lambda t, b: OFF * (1 + EPS)}
  first = world(**kwargs, multiple=None).drive()
  at = _ratio(first.witness_errors["port"][0], first)
  assert 0.5 < at < 2 < 100 < _ratio(first.pairs[("truth", "port")].leaf_errors[0],
                               first)
  for multiple, retaken in ((at, False), (np.nextafter(at, 0), True)):
    nudged = world(**kwargs, multiple=multiple).drive().nudged_errors["port"]
    assert (nudged[0] is not None) == retaken, multiple


# The report.


def test_the_report_holds_every_field_of_the_checks(monkeypatch):
  clock = itertools.count()
  monkeypatch.setattr(lockstep, "time",
                      types.SimpleNamespace(perf_counter=lambda: next(clock)))
  # Step 4's calibration flips (2e-3, 500x the others): left out of the
  # band; the port is 1% off at step 4 with pmap correct.
  eps = {1: EPS, 2: EPS, 4: 2e-3, 6: EPS}
  w = world({"port": planted_at(4)}, check_every=2, steps=6, eps=eps.get)
  checks = w.drive()
  checks.evaluate_shared(6, lambda run, state: {"accuracy": 1.0})
  report = checks.report(10.0, "the reason")
  judged = leaf_bands.bands(checks.band_leaves, lockstep.band_of,
                            lockstep.BAND_FLOOR)
  w_leaf = "['params']['w'] (4,)"
  assert judged["flips"] == {w_leaf: [2]}
  ratios = [leaf_bands.score(e, judged)[0]
            for e in checks.pairs[("truth", "port")].leaf_errors]
  assert ratios[2] > 1000 and ratios[0] == 0.0
  pair = report["pairs"]["truth~port"]
  assert pair == {
      "errors": checks.pairs[("truth", "port")].errors, "ratios": ratios,
      "leaves": ["", "", w_leaf, ""],
      "metric_gaps": checks.pairs[("truth", "port")].metric_gaps,
      "stopped_bitwise_at": 4, "bitwise": False, "sign_flips": {}}
  assert report["pairs"]["truth~pmap"]["bitwise"] is True
  assert set(report["pairs"]) == {"truth~pmap", "truth~port", "pmap~port"}
  nudged = report.pop("nudged_ratios")
  port = nudged["port"]
  assert [port[0], port[1], port[3]] == [None, None, None] and port[2] > 1000
  witness = report.pop("witness_ratios")
  assert witness == {"port": [leaf_bands.score(e, judged)[0]
                              for e in checks.witness_errors["port"]]}
  assert witness["port"][2] > 1000 and witness["port"][3] == 0.0
  report.pop("pairs")
  assert report == {
      "check_every": 2, "checked_steps": 4, "steps": [1, 2, 4, 6],
      "band_per_step": checks.band, "calibrated_steps": [1, 2, 4, 6],
      "band": judged["band"],
      "leaf_bands": judged["bands"], "unjudged_leaves": {},
      # w is judged by its band; b and the step counter, which no
      # calibration moved, at the floor.
      "judged_leaves": 3, "leaves": 3, "leaf_band_floor": judged["floor"],
      "band_flip_steps": [4], "band_floor": lockstep.BAND_FLOOR,
      "multiple": 10.0, "reason": "the reason",
      "extra_steps": checks.extra_steps, "seconds": 2 * 4,
      "apart": {"truth": [], "pmap": [], "port": [6]},
      "stepped": {"truth": [], "pmap": [], "port": [6]},
      "port_runs": ["port"], "witness": "pmap",
      "nudge_ulps": [1, 2, 4, 8], "flip_limit": 1, "nudged_limit": 1,
      "truth": "truth", "band_sign_flips": {},
      "shared_eval": {n: {"accuracy": 1.0} for n in ("truth", "pmap",
                                                     "port")},
      "metric_band": checks.metric_band, "batch_rows": ROWS,
      "judged": judged}
  assert report["band"] == pytest.approx(EPS, rel=1e-6)
  assert report["extra_steps"] == 4 + 1 + 2 * len(lockstep.NUDGE_ULPS)


def test_a_leaf_rounding_moves_too_far_is_named_unjudged_and_not_counted():
  eps = {1: 1e-2, 2: 1e-2}
  checks = world(eps=eps.get, steps=2).drive()
  report = checks.report(10.0, "")
  w_leaf = "['params']['w'] (4,)"
  assert report["unjudged_leaves"] == {w_leaf: pytest.approx(1e-2, rel=1e-6)}
  assert report["leaf_bands"] == {}
  assert report["judged_leaves"] == 2 and report["leaves"] == 3
  assert report["band_flip_steps"] == []


def test_the_leaves_are_named_by_their_path_and_shape():
  checks = world().checks
  assert checks.leaf_names == [
      "['params']['b'] (3,)", "['params']['w'] (4,)", "['step'] ()"]


def test_the_sign_flips_each_comparison_counts_are_recorded_by_step(
    monkeypatch):
  # Every comparison hands update_errors a dict for the elements it leaves
  # out as sign flips (equivalence.SIGN_FLIP_SHARE); the lockstep records
  # their sum per checked step, the calibration's apart from each pair's.
  errors = lockstep.equivalence.update_errors
  handed = []

  def counting(a, b, start, sign_flips=None):
    handed.append(sign_flips is not None)
    if sign_flips is not None:
      sign_flips.update({"['params']['w'] (4,)": 2, "['params']['b'] (3,)": 1})
    return errors(a, b, start)
  monkeypatch.setattr(lockstep.equivalence, "update_errors", counting)
  report = world({"port": planted_at()}, steps=2).drive().report(10.0, "why")
  assert report["band_sign_flips"] == {1: 3, 2: 3}
  assert {name: pair["sign_flips"] for name, pair in report["pairs"].items()
          } == {name: {1: 3, 2: 3} for name in report["pairs"]}
  assert any(handed) and not all(handed)  # the witness's and retakes': none
