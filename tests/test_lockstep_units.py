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

import dataclasses
import itertools
import types

import jax
import numpy as np
import pytest

from compare._src.prove import equivalence
from compare._src.prove import leaf_bands
from compare._src.prove import lockstep
from shardport.strategies import perturbations

LR = 0.5
ROWS = 8
EPS = 4e-6  # the calibration's change of the update: the band
OFF = 1.01  # a planted step: 1% off
# Its error as a share of its own update (a pair judged against the port's).
ERR = (OFF - 1) / OFF


def _batches(n, seed=0):
  rng = np.random.default_rng(seed)
  return [{"x": rng.normal(size=(ROWS, 4)) + 1.0} for _ in range(n)]


def _initial():
  return {"params": {"w": np.array([1.0, -2.0, 0.5, 3.0]),
                     "b": np.array([0.25, 0.5, 0.75])},
          "step": np.asarray(0)}


def _sgd(host, x, scale=1.0):
  """One step of the host-layout state on rows `x`; the update times
  `scale`."""
  w = host["params"]["w"]
  grad = np.mean(x, axis=0) * (1.0 + 0.1 * w)
  new_w = w - LR * scale * grad
  return ({"params": {"w": new_w, "b": host["params"]["b"]},
           "step": host["step"] + 1},
          {"loss": np.sum(new_w ** 2)})


class HostLayout:
  """A module whose runs hold the state as the host does."""

  def __init__(self, log, placement):
    self.log, self.placement = log, placement

  def to_host(self, state):
    return jax.tree.map(np.array, state)

  def from_host(self, host, placement, like, step, calls):
    assert placement == self.placement and calls == 1 and like is not None
    self.log.append(("from_host", self.placement, step))
    return jax.tree.map(np.array, host)

  def put_batch(self, batch, placement):
    assert placement == self.placement, placement
    return batch

  def metrics_to_host(self, metrics):
    return {k: np.asarray(v) for k, v in metrics.items()}


class NoFromHost(HostLayout):
  """Our strategies' one-device reference: the host cannot place it."""

  from_host = property(lambda self: (_ for _ in ()).throw(AttributeError))


class PortLayout(HostLayout):
  """A port's layout: the weight a 2x2 block, other names."""

  def to_host(self, state):
    return {"params": {"w": np.array(state["w2"]).reshape(4),
                       "b": np.array(state["bias"])},
            "step": np.array(state["n"])}

  def from_host(self, host, placement, like, step, calls):
    super().from_host(host, placement, like, step, calls)
    return self.of_host(host)

  @staticmethod
  def of_host(host):
    return {"w2": np.array(host["params"]["w"]).reshape(2, 2),
            "bias": np.array(host["params"]["b"]), "n": np.array(host["step"])}


def _host_step(scale=lambda t, batch: 1.0):
  def step(state, batch):
    return _sgd(state, batch["x"], scale(int(state["step"]) + 1, batch))
  return step


def _port_step(scale=lambda t, batch: 1.0):
  """The port's step in its own layout; `scale(t, batch)` its update's
  factor at step t (1.0: correct)."""
  def step(state, batch):
    host = PortLayout(None, None).to_host(state)
    new, metrics = _sgd(host, batch["x"], scale(int(host["step"]) + 1, batch))
    return PortLayout.of_host(new), metrics
  return step


def planted_at(*steps):
  return lambda t, batch: OFF if t in steps else 1.0


@dataclasses.dataclass(frozen=True)
class Scaled:
  """A calibration change: the batch scaled by `1 + eps` (or the state)."""

  eps: float
  seen: list

  def batch(self, host_batch, step, n_devices):
    self.seen.append(("batch", step, n_devices))
    return {"x": host_batch["x"] * (1.0 + self.eps)}

  def state(self, state):
    self.seen.append(("state", state))
    return state


@dataclasses.dataclass
class World:
  checks: object
  runs: dict
  log: list
  rows: list
  seen: list
  batches: list

  def drive(self, upto=None):
    """The runner's loop (`compare._src.prove.runner.train`)."""
    for i, batch in enumerate(self.batches[:upto]):
      self.step(i + 1, batch)
    return self.checks

  def step(self, t, batch):
    self.checks.before_step(t, batch)
    for run in self.runs.values():
      run.state, metrics = run.step(run.state, batch)
      run.step_metrics = run.module.metrics_to_host(metrics)
      run.host = run.module.to_host(run.state)
    self.checks.after_step(t, batch)


def world(ports=None, *, witness="pmap", witness_step=None, truth_module=None,
          check_every=1, steps=4, eps=lambda t: EPS, multiple=10.0,
          pairs=None, port_runs=None):
  """Truth, pmap (its witness) and port runs (`{name: scale}`), each with
  its module, placement and step, and the `Lockstep` over them."""
  log, rows, seen = [], [], []
  ports = {"port": lambda t, b: 1.0} if ports is None else ports

  def run(name, module, step, state):
    return types.SimpleNamespace(
        name=name, module=module, step=step, state=state, placement=name,
        calls=1, step_metrics={}, host=None, initial=None)

  runs = {"truth": run("truth", (truth_module or HostLayout)(log, "truth"),
                       _host_step(), _initial()),
          "pmap": run("pmap", HostLayout(log, "pmap"),
                      _host_step(witness_step or (lambda t, b: 1.0)),
                      _initial())}
  for name, scale in ports.items():
    runs[name] = run(name, PortLayout(log, name), _port_step(scale),
                     PortLayout.of_host(_initial()))

  def perturbation(t):
    seen.append(("perturbation", t))
    return Scaled(eps(t), seen)

  def rows_of(run, batch):
    rows.append(run.name)
    return batch

  if pairs is None:
    pairs = [("truth", "pmap"), *(("truth", p) for p in ports),
             *(("pmap", p) for p in ports)]
  checks = lockstep.Lockstep(
      list(runs.values()), pairs, check_every, steps, 2, rows_of,
      truth="truth", perturbation=perturbation,
      port_runs=tuple(ports) if port_runs is None else port_runs,
      witness=witness, multiple=multiple)
  return World(checks, runs, log, rows, seen, _batches(steps))


def _w(host):
  return host["params"]["w"]


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
  assert checks.multiple == 7.0 and checks.nudged_errors == {"port": []}
  assert checks._truth_nudged == (None, [])
  assert (checks.check_every, checks.steps, checks.n_devices) == (1, 4, 2)
  assert checks.checked == [] and checks.band == [] and checks.seconds == 0.0
  assert checks.band_leaves == [] and checks.metric_band == {}
  assert checks.batch_rows is None and checks.shared_eval is None
  assert checks.extra_steps == 0
  assert checks.apart == {n: [] for n in runs}
  assert checks.stepped == {n: [] for n in runs}
  assert checks._calibration is None and checks._truth_before is None


def test_each_run_keeps_its_skeleton_and_host_state_and_the_truths_is_shared():
  w = world()
  for name, run in w.runs.items():
    assert equivalence.trees_same_bits(run.host, _initial()), name
    assert jax.tree.structure(run.initial) == jax.tree.structure(run.state)
  assert w.checks._shared is w.runs["truth"].host
  assert w.checks.initial is w.runs["truth"].host
  assert w.checks._before == {n: r.host for n, r in w.runs.items()}


def test_a_witness_that_is_not_running_judges_no_port_run():
  checks = world(witness="absent").checks
  assert checks.witness is None and checks.witness_errors == {}
  assert world(witness=None).checks.witness_errors == {}


# Which steps are checked, and what a check costs.


def test_only_the_checked_steps_take_a_calibration_and_are_recorded():
  w = world(check_every=3, steps=7)
  checks = w.drive()
  assert checks.checked == [1, 3, 6, 7]
  assert [e[1] for e in w.seen if e[0] == "perturbation"] == [1, 3, 6, 7]
  assert len(checks.band) == len(checks.band_leaves) == 4


def test_no_step_is_checked_when_check_every_is_none():
  w = world(check_every=None, steps=3)
  checks = w.drive()
  assert checks.checked == [] and checks.extra_steps == 0 and w.seen == []


def test_the_calibration_steps_the_truths_own_state_on_the_changed_batch():
  w = world(check_every=3, steps=4)
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


def test_before_a_step_each_runs_host_state_is_kept_and_the_truths_shared():
  w = world(check_every=2, steps=4)
  w.step(1, w.batches[0])
  w.checks.before_step(2, w.batches[1])  # not checked: kept all the same
  assert w.checks._before == {n: r.host for n, r in w.runs.items()}
  assert w.checks._shared is w.runs["truth"].host


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
  assert w.checks._before == {} and w.checks._truth_before is None
  w.checks.before_step(2, w.batches[1])
  assert w.checks._before
  w.checks.after_step(2, w.batches[1])
  assert w.checks._before == {}
  w.step(3, w.batches[2])  # not checked
  assert w.checks._before == {}
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
  # Placed in its layout after t - 1 steps, on its own rows and devices.
  assert [e for e in w.log if e[0] == "from_host"] == [
      ("from_host", "port", 1), ("from_host", "port", 3)]
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
  checks = world(eps=eps.get, steps=3).drive()
  assert checks.band == [pytest.approx(1e-5, rel=1e-6), 0.0,
                         pytest.approx(3e-6, rel=1e-6)]
  assert list(checks.band_leaves[0]) == ["['params']['w'] (4,)"]
  assert checks.band_leaves[1] == {}  # a calibration that moved nothing
  assert checks.batch_rows == ROWS


def test_the_metric_band_is_the_largest_relative_gap_of_the_calibration():
  w = world(eps={1: 1e-5, 2: 0.0, 3: 3e-6}.get, steps=3)
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
  for module, placed in ((HostLayout, 4), (NoFromHost, 0)):
    w = world({"port": planted_at(2)}, witness=None, steps=2,
              truth_module=module)
    w.drive()
    truth_placed = [e for e in w.log if e[1] == "truth"]
    assert truth_placed == [("from_host", "truth", 1)] * placed, module
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
  assert checks._truth_nudged[0] == 2
  assert len(checks._truth_nudged[1]) == len(lockstep.NUDGE_ULPS)


def test_each_port_runs_retakes_are_its_own_not_the_truths_kept_ones():
  # Two ports 1% off at step 2: the second is retaken after the truth's
  # retakes are kept, and on its own steps it stays 1% off.
  w = world({"first": planted_at(2), "second": planted_at(2)},
            witness=None, steps=2)
  ratios = w.drive().report(10.0, "why")["nudged_ratios"]
  assert ratios["first"][1] > 1000 and ratios["second"][1] > 1000
  assert w.rows.count("first") == w.rows.count("second") == len(
      lockstep.NUDGE_ULPS)


def test_a_run_over_the_band_takes_no_more_retakes_than_the_flip_limit():
  checks = world({"port": planted_at(*range(1, 5))}, witness=None).drive()
  retaken = [e is not None for e in checks.nudged_errors["port"]]
  # One flip may be excused in 4 checked steps; one retake more.
  assert retaken == [True, True, False, False]
  many = world({"port": planted_at(*range(1, 41))}, witness=None,
               steps=40).drive()
  retaken = sum(e is not None for e in many.nudged_errors["port"])
  assert retaken == lockstep.flip_limit(40) + 1 == 3


def test_a_port_run_that_took_its_witnesss_step_is_not_retaken():
  # pmap made the same 1% step: the two programs agree, nothing to excuse.
  plant = planted_at(2)
  checks = world({"port": plant}, witness_step=plant, steps=2).drive()
  assert checks.nudged_errors == {"port": [None, None]}
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
      "stopped_bitwise_at": 4, "bitwise": False}
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
      "band_per_step": checks.band, "band": judged["band"],
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
      "nudge_ulps": [1, 2, 4, 8], "flip_limit": 1,
      "shared_eval": {n: {"accuracy": 1.0} for n in ("truth", "pmap",
                                                     "port")},
      "metric_band": checks.metric_band, "batch_rows": ROWS,
      "initial": checks.initial, "judged": judged}
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
  assert checks._leaf_names() == [
      "['params']['b'] (3,)", "['params']['w'] (4,)", "['step'] ()"]
