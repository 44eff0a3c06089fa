"""What the engine proves, as one typed value: the `Plan`.

A program comes to the engine once, described: a `Port` (`port_runs.plan`:
a team's, and our strategies written as Ports, `compare._src.ports`) or one
of our strategies not yet written as one (`strategy_plan.plan`). Each
builder asks its program everything once (which runs run here, their
calls per optimiser step, the batches, the test batch, the calibration
runs) and hands the engine a `Plan`; the engine reads its fields and never
calls back into the program, so no step of the proof depends on which
program it was handed. A negative control is a change of the `Plan`
(`planted`), made before the engine starts. How the verdicts judge (the
lockstep and calibration multiples) is the engine's own
(`compare._src.prove.judging`), not a program's.
"""

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from shardport.strategies.negative_controls import NegativeControl
from shardport.strategies.tolerances import Tolerance


@dataclasses.dataclass(frozen=True)
class PlannedRun:
  """One run the engine trains.

  Attributes:
    name: the run's name in the report.
    module: its program, with the backends' API
      (`shardport.strategies.protocol.StrategyModule`).
    variant: the module's variant (`"shard_map"`, `"jit"`, ...).
    calls: calls of its step per optimiser step.
  """

  name: str
  module: Any
  variant: str
  calls: int = 1


@dataclasses.dataclass(frozen=True)
class Plan:
  """A program as the engine runs and judges it.

  Attributes:
    name: what the report calls the program.
    runs: the runs that run here, the truth among them.
    skipped: `{run name: why}` for the runs the program has but cannot run
      here (pmap's one member per device, a nested pmap on this jax).
    pairs: `(a, b)` pairs compared, `b` the nearer the truth.
    truth: the run whose state the lockstep checks share, and which the
      calibration runs train again, changed.
    witness: the run every port run must take the same step as, for a pair
      of two programs to be excused a rounding flip (pmap's: no control
      plants its mistake there).
    port_runs: the runs a negative control plants its mistake in.
    tolerances: `{"first_step", "final"}`, each with its reason.
    judged_metrics: the summary metrics the end-of-run check judges.
    throughput_pair: `(pmap run, port run)` whose examples/s are compared.
    train_batches: `() -> ` every step's global host batch, in order (a
      new iterator at each call: our strategies' plans prove again).
    timing_batches: `count -> ` that many global host batches, which the
      timing windows cycle over (read only when timed).
    test_batch: the evaluation's host batch (`{}` where the program
      evaluates its host state itself).
    test_size: test examples, for the accuracy's floor of one (or None).
    eval_every: steps between the runs' evaluations.
    summarize: an evaluation's host sums -> the judged metrics.
    calibrations: `{name: perturbation}` of the free-running calibration
      runs (`shardport.strategies.perturbations`).
    calibration_change: what the calibration runs change, in words.
    calibration_summary: what they are, in one sentence.
    lockstep_perturbation: `t -> perturbation`: how the one-step band's
      step t changes the truth's.
    negative_controls: the mistakes `--negative-control` can plant.
    control: the planted control, once `planted`, else None.
  """

  name: str
  runs: tuple[PlannedRun, ...]
  pairs: tuple[tuple[str, str], ...]
  truth: str
  witness: str
  port_runs: tuple[str, ...]
  tolerances: dict[str, Tolerance]
  judged_metrics: tuple[str, ...]
  throughput_pair: tuple[str, str]
  train_batches: Callable[[], Iterable[Any]]
  timing_batches: Callable[[int], list]
  test_batch: Any
  test_size: int | None
  eval_every: int
  summarize: Callable[[dict], dict]
  calibrations: dict[str, Any]
  calibration_change: str
  calibration_summary: str
  lockstep_perturbation: Callable[[int], Any]
  negative_controls: tuple[NegativeControl, ...]
  skipped: dict[str, str] = dataclasses.field(default_factory=dict)
  control: NegativeControl | None = None

  def run(self, name: str) -> PlannedRun:
    """The run called `name`."""
    return next(run for run in self.runs if run.name == name)

  def calls_per_step(self, name: str) -> int:
    """Calls of run `name`'s step per optimiser step."""
    return self.run(name).calls


def planted(plan: Plan, control: NegativeControl | None) -> Plan:
  """`plan` with `control`'s mistake in every port run (None: as it is).

  The one way a negative control reaches the engine: the runs it plants
  in are new values, so the unplanted plan is never changed.
  """
  if control is None:
    return plan
  runs = tuple(dataclasses.replace(run, module=control.plant(run.module,
                                                             run.name))
               if run.name in plan.port_runs else run for run in plan.runs)
  return dataclasses.replace(plan, runs=runs, control=control)
