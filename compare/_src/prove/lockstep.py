"""Lockstep checks: every run takes its step from one shared state.

Free-running runs drift apart chaotically, so a mistake that starts late
hides inside their drift. At every checked step t each run also takes step t
from the reference's state after t - 1 steps, placed in the run's own layout
(the layout the checkpoints convert through, in memory), on batch t. Its
result is compared with the reference's own step t, and the runs' results
with each other, as a difference relative to the step's update
(`equivalence.update_errors`). Nothing carries over from one step to the
next, so the tolerance does not grow with t: it is a multiple of the
one-step band, the same step of the reference taken again with its batch
rows reordered (summation order only), measured at the first
`CALIBRATED_FIRST` checked steps and at every checked step where a run
starts or ends apart from the truth (`Lockstep.after_step`).

A run whose state is bitwise the shared state takes no extra step.

Each port run's step is also compared with its witness's (the pmap run, never
planted): a pair whose two programs differ (pmap and the one-device
reference) can part at one step by a rounding flip, which the verdict
excuses only where every port run in the pair took its witness's step
(`compare._src.prove.verdicts.lockstep`).
"""

import dataclasses
import itertools
import time

import jax

from compare._src.prove import equivalence
from compare._src.prove import host_copies
from compare._src.prove import leaf_bands
from compare._src.prove.leaf_bands import BAND_FLOOR
from compare._src.prove.leaf_bands import band_of
from compare._src.prove.leaf_bands import flip_limit
from compare._src.prove.leaf_bands import nudged_limit
# `place` and `skeleton` are the lockstep's (tests patch them here).
from compare._src.prove.placement import place
from compare._src.prove.placement import skeleton
from shardport.strategies import perturbations
from shardport.training.metrics import global_devices

# A port run whose step lies over the band from the ground truth's, where
# no witness took its step, takes it again on its batch with every float
# moved by a few ulps (each up or down at random, `NUDGE_ULPS`), and so
# does the truth: a ReLU whose input lies within the two programs' rounding
# of zero can fall to the other side in either, where a mistake in the step
# stays in every retake. The smallest error between the two sides' steps,
# as taken or retaken, is what the verdict may excuse a flip by
# (`compare._src.prove.verdicts`). Measured on the einsum ensemble port's flip at
# step 46 (docs/jax-facts.md): a one-ulp nudge of the port's batch left it
# there, one of 1, 4 ulps on either side matched the truth to 2.1e-6 of the
# update, and 16 ulps or more flipped other ReLUs (3.8e-3): hence 1 to 8.
NUDGE_ULPS = (1, 2, 4, 8)
# Checked steps calibrated whatever the runs do: the band's sample before a
# pair first parts. With the parting step's own, three: the fewest whose
# median stands under one calibration flip, so `band_of` can leave it out
# (with the parting step's alone, a 1% mistake there hid under its flip:
# `test_the_report_holds_every_field_of_the_checks`).
# After them a step where every run ends bitwise the truth takes none:
# there is nothing for a band to judge (the proof of a bitwise port then
# costs its two programs and little more; issue 57).
CALIBRATED_FIRST = 2


@dataclasses.dataclass
class _Pair:
  """One pair's lockstep errors, and whether its free-running states are
  still bitwise."""

  errors: list = dataclasses.field(default_factory=list)  # the largest
  # Per checked step: `{leaf: error}` (`equivalence.update_errors`).
  leaf_errors: list = dataclasses.field(default_factory=list)
  # Per checked step: `{metric: relative gap}` of the two steps' metrics.
  metric_gaps: list = dataclasses.field(default_factory=list)
  # `{checked step: elements left out as sign flips}`, where any were.
  sign_flips: dict = dataclasses.field(default_factory=dict)
  bitwise_so_far: bool = True
  stopped_bitwise_at: int | None = None


class Lockstep:
  """The lockstep checks of one comparison, step by step.

  Call `before_step(t, host_batch)` before the runs take their free-running
  step t and `after_step(t, host_batch)` after; `report()` at the end.
  """

  def __init__(self, runs, pairs, check_every: int, steps: int,
               n_devices: int, rows, truth: str, perturbation,
               port_runs=(), witness=None, multiple=None):
    """`truth` names the ground-truth run; `perturbation(t)` is the change
    (`shardport.strategies.perturbations`) of its calibration step at step t;
    `port_runs` are the runs a negative control plants its mistake in,
    `witness` the run each of them must take the step of (pmap), if it
    runs; `multiple` the band's multiple a pair may lie within, which
    decides where a port run retakes its step nudged (none without it)."""
    self.runs = {run.name: run for run in runs}
    self.reference = self.runs[truth]
    self.pairs = {(a, b): _Pair() for a, b in pairs}
    self.port_runs = tuple(r for r in port_runs if r in self.runs)
    self.witness = witness if witness in self.runs else None
    self.witness_errors = {run: [] for run in self.port_runs
                           if self.witness is not None}
    self.multiple = multiple
    # Per port run (and the witness, whose pair with the truth flips too)
    # and checked step: the smallest error of its nudged
    # retakes from the truth's step, or None where it took none.
    witnesses = [self.witness] if self.witness else []
    self.nudged_errors = {run: [] for run in (*self.port_runs, *witnesses)}
    self._truth_nudged = (None, [])
    self.check_every, self.steps, self.n_devices = check_every, steps, n_devices
    self.rows, self.perturbation = rows, perturbation
    self.checked, self.band, self.seconds = [], [], 0.0
    # Per calibrated step (`calibrated`): the calibration's leaf errors.
    self.band_leaves, self.calibrated = [], []
    self.band_sign_flips = {}  # as `_Pair.sign_flips`, the calibration's
    self.metric_band, self.batch_rows, self.shared_eval = {}, None, None
    self.extra_steps = 0
    # Per run: the checked steps it started apart from the shared state,
    # and those it took its extra step from it at (they must be the same).
    self.apart = {name: [] for name in self.runs}
    self.stepped = {name: [] for name in self.runs}
    self._calibration = self._truth_before = None  # the truth's, host
    # Each run's host state before the step: the shared state at step 1 is
    # the common initial state, which every run should hold bitwise. A
    # run's host state bitwise an earlier run's is that one (one copy).
    hosts = []
    for run in self.runs.values():
      run.initial = skeleton(run.state)
      run.host = host_copies.same_as_one_of(
          host_copies.of(run.module, run.state), hosts)
      hosts.append(run.host)
    # At a checked step, before it: the one host copy a proof keeps (the
    # truth's own step may donate its state).
    self._shared = host_copies.kept(self.reference.host)
    # Per run, at a checked step: whether it starts it apart from the
    # shared state (the run's host state before the step is not kept).
    self._apart_now = {}
    self.leaf_names = host_copies.leaf_names(self.reference.host)

  @property
  def shared(self):
    """The truth's host state before the checked step being taken (None
    between checks): at step 1, the common initial state."""
    return self._shared

  def is_checked(self, t: int) -> bool:
    """Step 1, every `check_every`-th step and the last are checked (none
    where `check_every` is None: measuring what the checks cost)."""
    if self.check_every is None:
      return False
    return t == 1 or t % self.check_every == 0 or t == self.steps

  def _planned_checks(self) -> int:
    return sum(self.is_checked(t) for t in range(1, self.steps + 1))

  def before_step(self, t: int, host_batch) -> None:
    """A truth the host cannot place takes its calibration step t now, from
    its own state, before its own step may donate it (no copy outlives the
    calibration step); one it can, after the steps, where one is needed."""
    truth = self.reference.host
    self._shared = host_copies.kept(truth) if self.is_checked(t) else None
    if self.is_checked(t):
      start = time.perf_counter()
      self._apart_now = {name: run.host is not truth and not (
          equivalence.trees_same_bits(run.host, self._shared))
                         for name, run in self.runs.items()}
      # A truth the host cannot place (our strategies' one-device
      # references) keeps its own state for its nudged retakes.
      if not self._truth_placed():
        self._calibration = self._calibration_step(t, host_batch)
        self._truth_before = jax.tree.map(lambda x: x.copy(),
                                          self.reference.state)
      self.seconds += time.perf_counter() - start

  def after_step(self, t: int, host_batch) -> None:
    """Tracks bitwise pairs; at a checked step, steps and compares."""
    for (a, b), pair in self.pairs.items():
      same = equivalence.trees_same_bits(self.runs[a].host,
                                         self.runs[b].host)
      if pair.bitwise_so_far and not same:
        pair.bitwise_so_far = False
        # Reported only for a pair that was bitwise for some steps.
        pair.stopped_bitwise_at = t if t > 1 else None
    if not self.is_checked(t):
      return
    start = time.perf_counter()
    if self._calibration is None and self._needs_calibration():
      self._calibration = self._calibration_step(t, host_batch)
    for name, apart in self._apart_now.items():
      if apart:
        self.apart[name].append(t)
    stepped = {name: self._step_from_shared(run, t, host_batch)
               for name, run in self.runs.items()}
    results = {name: state for name, (state, _) in stepped.items()}
    metrics = {name: m for name, (_, m) in stepped.items()}
    for (a, b), pair in self.pairs.items():
      flips = {}
      errors = equivalence.update_errors(results[a], results[b],
                                         self._shared, flips)
      if flips:
        pair.sign_flips[t] = sum(flips.values())
      pair.errors.append(max(errors.values(), default=0.0))
      pair.leaf_errors.append(errors)
      pair.metric_gaps.append(equivalence.metric_gaps(metrics[a],
                                                      metrics[b]))
    if self._calibration is not None:
      self._calibrate(t)
    self.batch_rows = len(next(iter(jax.tree.leaves(host_batch))))
    for run, errors in self.witness_errors.items():
      errors.append(equivalence.update_errors(
          results[run], results[self.witness], self._shared))
    for run, errors in self.nudged_errors.items():
      errors.append(self._nudged_error(run, t, host_batch, results))
    self.checked.append(t)
    self._apart_now, self._truth_before, self._shared = {}, None, None
    self._truth_nudged = (None, [])  # no retake's copy outlives its step
    self.seconds += time.perf_counter() - start

  def _truth_placed(self) -> bool:
    """Whether the truth's state can be placed from the host (a Port's and
    our backends' programs can; our one-device references cannot)."""
    return hasattr(self.reference.module, "from_host")

  def _needs_calibration(self) -> bool:
    """After a checked step's free-running steps: whether its band is
    measured (one of the first `CALIBRATED_FIRST`, or a run started or
    ended it apart from the truth)."""
    truth = self.reference.host
    return (len(self.calibrated) < CALIBRATED_FIRST
            or any(self._apart_now.values())
            or not all(equivalence.trees_same_bits(run.host, truth)
                       for run in self.runs.values()))

  def _calibrate(self, t: int) -> None:
    """Checked step t's band: the truth's calibration step against its
    own step."""
    calibration, calibration_metrics = self._calibration
    self._calibration = None
    flips = {}
    self.band_leaves.append(equivalence.update_errors(
        calibration, self.reference.host, self._shared, flips))
    if flips:
      self.band_sign_flips[t] = sum(flips.values())
    self.calibrated.append(t)
    self.band.append(max(self.band_leaves[-1].values(), default=0.0))
    for key, gap in equivalence.metric_gaps(
        calibration_metrics, self.reference.step_metrics).items():
      self.metric_band[key] = max(self.metric_band.get(key, 0.0),
                                  equivalence.relative_gap(gap))

  def evaluate_shared(self, steps: int, evaluate) -> None:
    """Every run's own `evaluate(run, state)` of the ground truth's state
    after `steps` steps, placed in the run's layout: the end-of-run check
    that free-running chaos cannot reach (`compare._src.prove.verdicts.final`)."""
    shared = self.reference.host
    self.shared_eval = {
        name: evaluate(run, run.state if equivalence.trees_same_bits(
            run.host, shared) else place(run, shared, steps))
        for name, run in self.runs.items()}

  def _step_from_shared(self, run, t, host_batch):
    """`run`'s step t from the shared state: its state and its metrics, as
    host arrays."""
    if run is self.reference or not self._apart_now[run.name]:
      return run.host, run.step_metrics
    state = place(run, self._shared, t - 1)
    batch = run.module.put_batch(self.rows(run, host_batch), run.placement)
    state, metrics = run.step(state, batch)
    self.extra_steps += 1
    self.stepped[run.name].append(t)
    return (host_copies.of(run.module, state),
            run.module.metrics_to_host(metrics))

  def _nudged_error(self, name, t, host_batch, results):
    """Every pairing of run `name`'s step t (a port run's or the witness's)
    and the truth's, each as
    taken or retaken on nudged batches, as `{leaf: error}`, where its own
    step lies over the band so far from the truth's and from its witness's
    (each leaf against its own band, `compare._src.prove.leaf_bands`); None
    elsewhere. The verdict takes the pairing closest to the truth."""
    if self.multiple is None:
      return None
    # Each leaf's median band so far: its final band is at least that, so a
    # step under this is under the verdict's too.
    judged = leaf_bands.so_far(self.band_leaves, BAND_FLOOR)
    truth = results[self.reference.name]
    error, _ = leaf_bands.score(equivalence.update_errors(
        results[name], truth, self._shared), judged)
    witnessed = (name in self.witness_errors and leaf_bands.score(
        self.witness_errors[name][-1], judged)[0] <= self.multiple)
    if error <= self.multiple or witnessed:
      return None
    # No more retakes than the flips the verdict may excuse, and one more:
    # a run over the band at more steps fails whatever they show.
    retaken = sum(e is not None for e in self.nudged_errors[name])
    if retaken > nudged_limit(self._planned_checks()):
      return None
    # Either side may be the one whose ReLU input lies within rounding of
    # zero: both are retaken. The truth's retakes are kept for the step
    # (every run's pairings take them); the run's, one at a time.
    if self._truth_nudged[0] != t:
      self._truth_nudged = (t, list(self._nudged_steps(self.reference, t,
                                                       host_batch)))
    truths = [truth, *self._truth_nudged[1]]
    ports = itertools.chain([results[name]], self._nudged_steps(
        self.runs[name], t, host_batch))
    return [equivalence.update_errors(port, truth, self._shared)
            for port in ports for truth in truths]

  def _nudged_steps(self, run, t, host_batch):
    """`run`'s step t from the shared state on its batch nudged by each of
    `NUDGE_ULPS`, as host states, one at a time."""
    for i, ulps in enumerate(NUDGE_ULPS):
      batch = perturbations.nudged_by(host_batch, ulps, seed=(t, i))
      # The shared state placed anew: the truth's own may be donated by now.
      state = (jax.tree.map(lambda x: x.copy(), self._truth_before)
               if run is self.reference and self._truth_before is not None
               else place(run, self._shared, t - 1))
      state, _ = run.step(state, run.module.put_batch(self.rows(run, batch),
                                                      run.placement))
      self.extra_steps += 1
      yield host_copies.of(run.module, state)

  def _calibration_step(self, t, host_batch):
    """The ground truth's step t from its own state, changed the way that
    moves only rounding (its rows reordered, or its state nudged)."""
    change = self.perturbation(t)
    batch = change.batch(host_batch, t - 1, global_devices(self.n_devices))
    reference = self.reference
    # Placed from the shared state, or, before the truth's own step, a copy
    # of its state: the step may donate it, and the truth's step follows.
    state = (place(reference, self._shared, t - 1) if self._truth_placed()
             else jax.tree.map(lambda x: x.copy(), reference.state))
    state, metrics = reference.step(change.state(state),
                                    reference.module.put_batch(
                                        self.rows(reference, batch),
                                        reference.placement))
    self.extra_steps += 1
    return (host_copies.of(reference.module, state),
            reference.module.metrics_to_host(metrics))

  def report(self, multiple: float, reason: str) -> dict:
    """The checked steps, each leaf's band, every pair's errors and their
    ratio to the judged leaves' own bands, each port run's ratio against
    its witness, and their cost."""
    judged = leaf_bands.bands(self.band_leaves, band_of, BAND_FLOOR)

    def ratios(per_step):
      return [leaf_bands.score(errors, judged)[0] for errors in per_step]

    pairs = {}
    for (a, b), pair in self.pairs.items():
      scored = [leaf_bands.score(e, judged) for e in pair.leaf_errors]
      pairs[f"{a}~{b}"] = {
          "errors": pair.errors, "ratios": [r for r, _ in scored],
          "leaves": [leaf for _, leaf in scored],
          "metric_gaps": pair.metric_gaps,
          "stopped_bitwise_at": pair.stopped_bitwise_at,
          "sign_flips": pair.sign_flips,
          "bitwise": pair.bitwise_so_far}
    return {
        "check_every": self.check_every, "checked_steps": len(self.checked),
        "steps": self.checked, "band_per_step": self.band,
        "calibrated_steps": self.calibrated,
        "band": judged["band"], "leaf_bands": judged["bands"],
        "unjudged_leaves": judged["unjudged"],
        "judged_leaves": len(judged["bands"]) + sum(
            leaf not in judged["bands"] and leaf not in judged["unjudged"]
            for leaf in self.leaf_names),
        "leaves": len(self.leaf_names),
        "leaf_band_floor": judged["floor"],
        "band_sign_flips": self.band_sign_flips,
        "band_flip_steps": sorted({self.calibrated[i] for flips in
                                   judged["flips"].values() for i in flips}),
        "band_floor": BAND_FLOOR, "multiple": multiple, "reason": reason,
        "extra_steps": self.extra_steps, "seconds": self.seconds,
        "apart": self.apart, "stepped": self.stepped,
        "port_runs": list(self.port_runs), "witness": self.witness,
        "witness_ratios": {run: ratios(errors)
                           for run, errors in self.witness_errors.items()},
        "nudged_ratios": {run: [None if pairings is None else min(
            ratios(pairings)) for pairings in per_step]
                          for run, per_step in self.nudged_errors.items()},
        "nudge_ulps": list(NUDGE_ULPS),
        "flip_limit": flip_limit(len(self.checked)),
        "nudged_limit": nudged_limit(len(self.checked)),
        "truth": self.reference.name,
        "shared_eval": self.shared_eval,
        "metric_band": self.metric_band, "batch_rows": self.batch_rows,
        "judged": judged, "pairs": pairs}
