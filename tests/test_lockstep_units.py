"""The lockstep checks (`compare._src.prove.lockstep.Lockstep`) driven by fake
runs, no program: a 4-float weight trained by SGD on 8-row batches, numpy
all through, each step a few microseconds. The truth and the witness
(pmap) hold the state as the host does; a port run holds it in a layout of
its own (the weight as a 2x2 block under other names), so a state that
reaches the wrong run's step raises. A calibration step scales its batch by
`1 + EPS` (a band of EPS of the update, exactly); a planted port run takes
a step 1% off at the steps it names. Each test names one behaviour of the
checks (which steps are checked and stepped, which pair parts where, the
band, the retakes that excuse a rounding flip and not a 1% mistake, the
host states let go) and shows it can fail: the plant is found, the correct
port is not.
"""

import itertools
import types

import jax
import numpy as np
import pytest

from compare._src.prove import equivalence
from compare._src.prove import lockstep
from tests.lockstep_fakes import (
    EPS, ERR, NoFromHost, OFF, PortLayout, ROWS, _initial, _sgd,
    planted_at, world)


# pylint: disable=protected-access


# What a Lockstep holds before the first step.


def test_a_new_lockstep_knows_its_runs_and_has_checked_nothing():
  w = world({"port": planted_at()}, port_runs=("port", "absent"),
            multiple=7.0)
  checks, runs = w.checks, w.runs
  assert checks.runs == runs and checks.reference is runs["truth"]
  assert list(checks.pairs) == [("truth", "pmap"), ("truth", "port"),
                                ("pmap", "port")]
  assert all(p == lockstep._Pair() for p in checks.pairs.values())
  assert checks.port_runs == ("port",)  # a port run that is not running: out
  assert checks.witness == "pmap" and checks.witness_errors == {"port": []}
  # The witness retakes too: its pair with the truth flips as a port's does.
  assert checks.multiple == 7.0 and checks.nudged_errors == {"port": [],
                                                             "pmap": []}
  assert checks._truth_nudged == (None, [])
  assert (checks.check_every, checks.steps, checks.n_devices) == (1, 4, 2)
  assert checks.checked == [] and checks.band == [] and checks.seconds == 0.0
  assert checks.band_leaves == [] and checks.metric_band == {}
  assert checks.batch_rows is None and checks.shared_eval is None
  assert checks.extra_steps == 0
  assert checks.apart == {n: [] for n in runs}
  assert checks.stepped == {n: [] for n in runs}
  assert checks._calibration is None and checks._truth_before is None
  assert checks._apart_now == {}  # no step started apart yet


def test_each_run_keeps_its_skeleton_and_runs_that_agree_share_one_host():
  w = world()
  truth = w.runs["truth"].host
  for name, run in w.runs.items():
    assert equivalence.trees_same_bits(run.host, _initial()), name
    assert jax.tree.structure(run.initial) == jax.tree.structure(run.state)
    # Issue 57: one host copy of the state where the runs hold its bits.
    assert run.host is truth, name
  assert w.checks._shared is truth and w.checks.shared is truth
  # The names only: the initial state itself is not kept.
  assert len(w.checks.leaf_names) == len(jax.tree.leaves(truth))


def test_a_run_apart_from_the_others_keeps_its_own_host_copy():
  w = world()
  pmap = w.runs["pmap"]
  pmap.state = {**pmap.state, "step": np.asarray(5)}
  lockstep.Lockstep(list(w.runs.values()), [("truth", "pmap")], 1, 4, 2,
                    lambda r, b: b, truth="truth",
                    perturbation=lambda t: None)
  assert pmap.host is not w.runs["truth"].host
  assert int(pmap.host["step"]) == 5
  assert w.runs["port"].host is w.runs["truth"].host


def test_a_witness_that_is_not_running_judges_no_port_run():
  checks = world(witness="absent").checks
  assert checks.witness is None and checks.witness_errors == {}
  assert world(witness=None).checks.witness_errors == {}


# Which steps are checked, and what a check costs.


def _calibrated(w):
  return [e[1] for e in w.seen if e[0] == "perturbation"]


def test_only_the_checked_steps_take_a_calibration_and_are_recorded():
  # A truth the host cannot place calibrates every checked step.
  w = world(check_every=3, steps=7, truth_module=NoFromHost)
  checks = w.drive()
  assert checks.checked == [1, 3, 6, 7] == checks.calibrated
  assert _calibrated(w) == [1, 3, 6, 7]
  assert len(checks.band) == len(checks.band_leaves) == 4


def test_after_the_first_checks_a_step_every_run_ends_bitwise_takes_none():
  w = world(check_every=3, steps=7)
  checks = w.drive()
  assert checks.checked == [1, 3, 6, 7]
  assert lockstep.CALIBRATED_FIRST == 2
  assert _calibrated(w) == [1, 3] == checks.calibrated
  assert len(checks.band) == len(checks.band_leaves) == 2
  assert checks.report(10.0, "")["calibrated_steps"] == [1, 3]


@pytest.mark.parametrize("planted, calibrated", [
    # Ends step 6 apart; starts step 7 apart (its state carries the 1%).
    ((6,), [1, 3, 6, 7]),
    # Parts at step 7 alone: the last step is calibrated for it.
    ((7,), [1, 3, 7]),
    # Parts at step 2, not checked: apart from step 3 on.
    ((2,), [1, 3, 6, 7])])
def test_a_step_a_run_starts_or_ends_apart_from_the_truth_is_calibrated(
    planted, calibrated):
  w = world({"port": planted_at(*planted)}, check_every=3, steps=7)
  checks = w.drive()
  assert _calibrated(w) == calibrated == checks.calibrated
  assert len(checks.band_leaves) == len(calibrated)
  # Every step the port is judged at has a band of its own step.
  assert set(checks.apart["port"]) <= set(calibrated)


def test_no_step_is_checked_when_check_every_is_none():
  w = world(check_every=None, steps=3)
  checks = w.drive()
  assert checks.checked == [] and checks.extra_steps == 0 and w.seen == []


def test_a_placed_truth_calibrates_after_the_steps_from_the_shared_state():
  w = world(check_every=3, steps=4)
  before = w.runs["truth"].state
  w.checks.before_step(1, w.batches[0])
  assert w.checks._calibration is None and w.seen == []
  w.step_runs(1, w.batches[0])
  w.checks.after_step(1, w.batches[0])
  assert w.seen[0] == ("perturbation", 1)
  kind, state = w.seen[2]
  # Placed anew from the host (the truth's own state may be donated).
  assert kind == "state" and state is not before
  assert equivalence.trees_same_bits(state, before)
  assert w.checks.calibrated == [1] and w.checks.extra_steps == 1


def test_the_calibration_steps_the_truths_own_state_on_the_changed_batch():
  w = world(check_every=3, steps=4, truth_module=NoFromHost)
  truth = w.runs["truth"]
  before = truth.state
  w.checks.before_step(1, w.batches[0])
  # Step t's change is told the t - 1 steps before it and the devices of
  # every process (2 here, one process).
  assert w.seen[0] == ("perturbation", 1)
  assert w.seen[1] == ("batch", 0, 2)
  kind, state = w.seen[2]
  assert kind == "state" and state is not before  # a copy: it may donate
  assert equivalence.trees_same_bits(state, before)
  assert w.rows == ["truth"] and w.checks.extra_steps == 1
  host, metrics = w.checks._calibration
  expected, expected_metrics = _sgd(_initial(), w.batches[0]["x"] * (1 + EPS))
  assert equivalence.trees_same_bits(host, expected)
  assert metrics == {"loss": expected_metrics["loss"]}
  # Step 2 is not checked (every third): no calibration.
  w.checks.after_step(1, w.batches[0])
  w.checks.before_step(2, w.batches[1])
  assert w.checks._calibration is None and w.checks.extra_steps == 1


def test_before_a_checked_step_only_the_truths_host_state_is_kept():
  w = world(check_every=2, steps=4)
  w.step(1, w.batches[0])
  w.checks.before_step(2, w.batches[1])
  assert w.checks._shared is w.runs["truth"].host
  assert w.checks._apart_now == {n: False for n in w.runs}
  w.checks.after_step(2, w.batches[1])
  w.checks.before_step(3, w.batches[2])  # not checked: nothing kept
  assert w.checks._shared is None and w.checks._apart_now == {}


def test_a_truth_the_host_cannot_place_keeps_a_copy_of_its_state_to_retake():
  w = world(truth_module=NoFromHost)
  truth = w.runs["truth"]
  w.checks.before_step(1, w.batches[0])
  kept = w.checks._truth_before
  assert kept is not None and kept["params"]["w"] is not truth.state[
      "params"]["w"]
  assert equivalence.trees_same_bits(kept, truth.state)
  placed = world()
  placed.checks.before_step(1, placed.batches[0])
  assert placed.checks._truth_before is None  # it is placed from the host


def test_the_host_states_are_let_go_after_every_step_checked_or_not():
  w = world(check_every=2, steps=4, truth_module=NoFromHost)
  w.step(1, w.batches[0])
  assert w.checks._apart_now == {} and w.checks._truth_before is None
  assert w.checks._shared is None
  w.checks.before_step(2, w.batches[1])
  assert w.checks._apart_now and w.checks._shared is not None
  w.checks.after_step(2, w.batches[1])
  assert w.checks._apart_now == {} and w.checks._shared is None
  w.step(3, w.batches[2])  # not checked
  assert w.checks._apart_now == {} and w.checks._shared is None
  assert w.checks._calibration is None


def test_the_seconds_are_the_checks_own_time_summed_over_the_steps(
    monkeypatch):
  clock = itertools.count()
  monkeypatch.setattr(lockstep, "time",
                      types.SimpleNamespace(perf_counter=lambda: next(clock)))
  checks = world(check_every=2, steps=5).drive()
  # One tick per timed part: the calibration before, the check after.
  assert checks.checked == [1, 2, 4, 5]
  assert checks.seconds == 2 * 4


# Bitwise pairs.


def test_a_pair_that_parts_after_step_1_says_where_and_one_at_step_1_not():
  w = world({"late": planted_at(2, 3), "early": planted_at(1)},
            pairs=[("truth", "pmap"), ("truth", "late"), ("truth", "early"),
                   ("late", "early")])
  checks = w.drive()
  bitwise = checks.pairs[("truth", "pmap")]
  assert bitwise.bitwise_so_far and bitwise.stopped_bitwise_at is None
  late = checks.pairs[("truth", "late")]
  assert not late.bitwise_so_far and late.stopped_bitwise_at == 2
  early = checks.pairs[("truth", "early")]
  assert not early.bitwise_so_far and early.stopped_bitwise_at is None
  assert checks.pairs[("late", "early")].stopped_bitwise_at is None


# The extra steps from the shared state.


def test_only_a_run_apart_from_the_shared_state_steps_again_from_it():
  w = world({"port": planted_at(1)}, check_every=2, steps=4, multiple=None)
  checks = w.drive()
  # The port parted at step 1: from step 2 on its own state is not the
  # truth's, so at each checked step it steps from the truth's.
  assert checks.apart == {"truth": [], "pmap": [], "port": [2, 4]}
  assert checks.stepped == {"truth": [], "pmap": [], "port": [2, 4]}
  # Placed in its layout after t - 1 steps, on its own rows and devices;
  # the truth placed for each calibration.
  assert [e for e in w.log if e[0] == "from_host"] == [
      ("from_host", "truth", 0), ("from_host", "truth", 1),
      ("from_host", "port", 1), ("from_host", "truth", 3),
      ("from_host", "port", 3)]
  # Three calibrations and two steps from the shared state.
  assert checks.extra_steps == 3 + 2
  assert w.rows.count("port") == 2 and w.rows.count("pmap") == 0


def test_a_run_stepped_from_the_shared_state_is_judged_by_that_step_alone():
  # Planted at step 1 only: the port drifts, yet its steps from the
  # truth's state are correct, and the pair's errors say so.
  checks = world({"port": planted_at(1)}).drive()
  errors = checks.pairs[("truth", "port")].errors
  assert errors[0] == pytest.approx(ERR, rel=1e-6)
  assert errors[1:] == [0.0, 0.0, 0.0]  # bitwise the truth's
  assert checks.stepped["port"] == [2, 3, 4]


def test_a_mistake_from_step_3_is_found_at_its_checked_steps_not_before():
  checks = world({"port": planted_at(3, 4)}).drive()
  errors = checks.pairs[("truth", "port")].errors
  assert errors[:2] == [0.0, 0.0]
  assert errors[2:] == [pytest.approx(ERR, rel=1e-6)] * 2
  assert checks.pairs[("truth", "pmap")].errors == [0.0] * 4


def test_a_mistake_at_a_step_not_checked_is_not_seen():
  checks = world({"port": planted_at(3)}, check_every=2, steps=4).drive()
  assert checks.checked == [1, 2, 4]
  assert max(checks.pairs[("truth", "port")].errors) < 1e-12


def test_the_stepped_results_are_what_each_pair_and_witness_compare():
  w = world({"port": planted_at(2)}, steps=2)
  w.step(1, w.batches[0])
  shared = w.runs["truth"].host
  w.step(2, w.batches[1])
  checks = w.checks
  pair = checks.pairs[("pmap", "port")]
  truth_step, truth_metrics = _sgd(shared, w.batches[1]["x"])
  port_step, port_metrics = _sgd(shared, w.batches[1]["x"], OFF)
  expected = equivalence.update_errors(truth_step, port_step, shared)
  assert pair.leaf_errors == [{}, expected]
  assert pair.errors == [0.0, max(expected.values())]
  assert pair.metric_gaps[-1] == equivalence.metric_gaps(truth_metrics,
                                                         port_metrics)
  assert pair.metric_gaps[0] == {"loss": [0.0, pytest.approx(
      float(_sgd(_initial(), w.batches[0]["x"])[1]["loss"]))]}
  assert checks.witness_errors == {"port": [{}, equivalence.update_errors(
      port_step, truth_step, shared)]}
  assert checks.pairs[("truth", "port")].leaf_errors == [{}, expected]


# The one-step band.


def test_the_band_is_the_calibrations_error_of_the_update_at_each_step():
  eps = {1: 1e-5, 2: 0.0, 3: 3e-6}
  # The port parts at step 3: its calibration is taken too.
  checks = world({"port": planted_at(3)}, eps=eps.get, steps=3).drive()
  assert checks.band == [pytest.approx(1e-5, rel=1e-6), 0.0,
                         pytest.approx(3e-6, rel=1e-6)]
  assert list(checks.band_leaves[0]) == ["['params']['w'] (4,)"]
  assert checks.band_leaves[1] == {}  # a calibration that moved nothing
  assert checks.batch_rows == ROWS


def test_the_metric_band_is_the_largest_relative_gap_of_the_calibration():
  w = world({"port": planted_at(3)}, eps={1: 1e-5, 2: 0.0, 3: 3e-6}.get,
            steps=3)
  gaps = []
  for t, batch in enumerate(w.batches, 1):
    shared = w.runs["truth"].host
    _, calibrated = _sgd(shared, batch["x"] * (1 + w.checks.perturbation(
        t).eps))
    _, own = _sgd(shared, batch["x"])
    gaps.append(abs(calibrated["loss"] - own["loss"]) / abs(own["loss"]))
    w.step(t, batch)
  assert w.checks.metric_band == {"loss": pytest.approx(max(gaps))}
  assert 0 < max(gaps) < 1e-3


# The shared state evaluated at the end.


def test_each_run_evaluates_the_truths_final_state_in_its_own_layout():
  w = world({"port": planted_at(1)}, steps=2)
  checks = w.drive()
  log_before = len(w.log)
  checks.evaluate_shared(2, lambda run, state: (run.name, state))
  ev = checks.shared_eval
  assert set(ev) == {"truth", "pmap", "port"}
  # Bitwise with the truth: its own state, not placed again.
  assert ev["truth"] == ("truth", w.runs["truth"].state)
  assert ev["pmap"][1] is w.runs["pmap"].state
  # Apart: the truth's state placed in the port's layout after 2 steps.
  name, placed = ev["port"]
  assert name == "port" and set(placed) == {"w2", "bias", "n"}
  assert equivalence.trees_same_bits(PortLayout(None, None).to_host(placed),
                                     w.runs["truth"].host)
  assert w.log[log_before:] == [("from_host", "port", 2)]
