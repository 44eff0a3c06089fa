"""Runs every backend of a strategy over the same batches and compares them.

All runs start from the same initial state and train in lockstep on the same
host batches, beside calibration runs (the reference on the same batches
with their rows in other orders: only float rounding changes). The largest
parameter difference of every pair, and of the reference and each
calibration run, is recorded at every step. A non-finite loss or state
stops training at its step. Throughput is timed afterwards, interleaved
across runs (`compare._src.measure.timing`).
"""

import dataclasses
import sys
import time

import jax
import numpy as np
import tqdm

from shardport.launch import distributed
from compare._src.prove import equivalence
from compare._src.prove import host_copies
from compare._src.prove import judging
from compare._src.measure import hlo
from compare._src.prove import lockstep
from compare._src.prove import progress as progress_lines
from shardport.strategies import perturbations
from compare._src.prove import switch
from compare._src.measure import utilisation
from shardport.strategies.reference import OneDevice
from shardport.training import dispatch
from shardport.training import metrics as run_metrics
from shardport.training.metrics import global_devices
from shardport.workloads import batches

CALIBRATIONS = perturbations.CALIBRATIONS


@dataclasses.dataclass
class Run:
  """One backend's run and what it measured."""

  name: str
  module: object
  variant: str
  calls: int = 1
  n_devices: int = 1
  perturbation: object = None  # a calibration run's change, else None
  local_batch: bool = False
  same_as: object = None
  placement: object = None
  state: object = None
  step: object = None
  evaluate: object = None
  compile_s: float = 0.0
  compiled: dict = dataclasses.field(default_factory=dict)
  losses: list = dataclasses.field(default_factory=list)
  since_eval: list = dataclasses.field(default_factory=list)
  step_metrics: dict = dataclasses.field(default_factory=dict)
  host: object = None  # its state as read (`compare._src.prove.host_copies`)
  digest: str | None = None  # its final state's, read before the timing
  initial: object = None  # its skeleton (`compare._src.prove.placement`)
  handover: dict | None = None  # what `--switch-at` handed over (pmap's)
  history: list = dataclasses.field(default_factory=list)
  summary: dict = dataclasses.field(default_factory=dict)


def _compile(run, batch):
  """Compiles the step ahead of time where it is one program.

  A step made of several programs called from Python (the classic ensemble's
  two pmaps) offers `lower_each`: its programs lowered as they run, compiled
  only to count collectives and read memory (`hlo.merged`), never run; their
  compile time is reported. A step with neither (a sequential per-member
  reference, a planted mistake) reports no compile time.
  """
  start = time.perf_counter()
  step = run.step
  if hasattr(step, "lower_each"):
    programs = [lowered.compile()
                for lowered in step.lower_each(run.state, batch)]
  elif hasattr(step, "lower"):
    programs = [step.lower(run.state, batch).compile()]
  else:
    return dispatch.optimizer_step(step, run.calls)
  run.compile_s = time.perf_counter() - start
  run.compiled = hlo.merged([hlo.describe(p) for p in programs])
  devices = (1 if isinstance(run.placement, OneDevice)
             else global_devices(run.n_devices))
  flops = [utilisation.flops(p, devices) for p in programs]
  run.compiled["flops_per_step"] = (
      None if None in flops else sum(flops) * run.calls)
  run.compiled["collectives_per_step"] = {
      k: v * run.calls
      for k, v in run.compiled["collectives_per_step_executed"].items()}
  if hasattr(step, "lower") and not _takes_host_local(run):
    step = programs[0]
  return dispatch.optimizer_step(step, run.calls)


def _takes_host_local(run) -> bool:
  """Whether the step converts host-local arrays itself (pmap, many
  processes): its ahead-of-time executable takes global arrays instead, so
  the step is called as it is (its own cache holds the compiled program)."""
  return jax.process_count() > 1 and run.module.STEP_TAKES_HOST_LOCAL


def rows(run, host_batch):
  """What `run.module.put_batch` takes from a global host batch.

  Data-parallel programs read only this process's slice of it
  (`batches.process_slice`); the references and ensembles take all of it
  in every process. In one process both are the whole batch.
  """
  if not run.local_batch or jax.process_count() == 1 or not host_batch:
    return host_batch
  part = batches.process_slice(len(next(iter(host_batch.values()))),
                               jax.process_index(), jax.process_count())
  return {k: v[part] for k, v in host_batch.items()}


def _evaluate(plan, run, test_batch, state=None):
  """`run`'s own evaluation of its state (or of `state`, in its layout)."""
  return plan.summarize(run.module.metrics_to_host(run.evaluate(
      run.state if state is None else state,
      run.module.put_batch(rows(run, test_batch), run.placement))))


def _runs(plan):
  runs = [Run(run.name, run.module, run.variant, calls=run.calls,
              local_batch=getattr(run.module, "PROCESS_LOCAL_BATCH", False))
          for run in plan.runs]
  truth = next(r for r in runs if r.name == plan.truth)
  runs += [Run(name, truth.module, truth.variant, calls=truth.calls,
               local_batch=truth.local_batch, perturbation=perturbation)
           for name, perturbation in plan.calibrations.items()]
  return runs


def _setup(plan, config, n_devices):
  runs = _runs(plan)
  progress_lines.release()  # the options and the program are checked
  progress_lines.phase("building each run's state and steps: " + ", ".join(
      run.name for run in runs))
  truth = next(r for r in runs if r.name == plan.truth)
  for run in runs:
    run.n_devices = n_devices
    run.placement = run.module.make_placement(n_devices)
    if run.perturbation is not None:
      # The ground truth's own programs, compiled once, on a copy of its
      # initial state (a compiled step is specialised to its pytree's
      # metadata, which a state created again would not share).
      run.same_as, run.evaluate = truth, truth.evaluate
      run.state = run.perturbation.state(
          jax.tree.map(lambda x: x.copy(), truth.state))
      continue
    run.state = run.module.create_state(config.seed, config, run.placement)
    run.step = run.module.make_train_step(config, run.placement, run.variant)
    run.evaluate = run.module.make_evaluate(config, run.placement)
  return runs


def _step(run, host_batch, i, n_devices, fetched):
  """One optimiser step of `run`; returns whether it stayed finite. Its
  host state is the one of `fetched` (this step's runs') holding its bits,
  if any (`host_copies.same_as_one_of`)."""
  if run.perturbation is not None:
    host_batch = run.perturbation.batch(host_batch, i,
                                        global_devices(n_devices))
  batch = run.module.put_batch(rows(run, host_batch), run.placement)
  if i == 0 and run.same_as is not None:
    run.step = run.same_as.step  # compiled just before, in this step
  elif i == 0:
    progress_lines.phase(f"compiling {run.name}")
    run.step = _compile(run, batch)
    # Many processes: gloo's context, built by each run's first collective,
    # fails if the processes (compiling at their own speeds) come 30 s apart.
    distributed.barrier(f"first-step-{run.name}")
  run.state, metrics = run.step(run.state, batch)
  # Fetched once: the lockstep checks judge every metric of the step.
  run.step_metrics = run.module.metrics_to_host(metrics)
  run.since_eval.append(run_metrics.scalar_metrics(run.step_metrics))
  run.losses.extend(v for k, v in run.since_eval[-1].items() if k == "loss")
  run.host = host_copies.same_as_one_of(
      host_copies.of(run.module, run.state),
      [host for host, _ in fetched.values()])
  if id(run.host) not in fetched:  # a host state checked once
    fetched[id(run.host)] = run.host, equivalence.all_finite(run.host)
  return (np.isfinite(run.since_eval[-1].get("loss", 0.0))
          and fetched[id(run.host)][1])


@dataclasses.dataclass
class Trained:
  """What the lockstep training found, for the verdicts and the report.

  Attributes:
    runs: every run, the calibration runs last.
    pairs: the pairs that ran, `(a, b)` with `b` the nearer the truth.
    drift: per pair (and the truth with each calibration run, `a~b`), the
      largest params difference at each step.
    diverged: `{run name: step}` for the runs that blew up or raised.
    checks: the lockstep checks (`lockstep.Lockstep`).
    raised: `{port run: (step, the error's first line)}` for a port's step
      that raised.
    first_steps: `equivalence.compare_pairs` of the first step (None where
      no step completed).
  """

  runs: list
  pairs: list
  drift: dict
  diverged: dict
  checks: lockstep.Lockstep
  raised: dict
  first_steps: list | None


# Seconds a process whose port step raised waits for its peers to raise at
# the same step: long enough for processes a compile apart, short enough
# that a job whose other processes wait inside the step's collectives ends
# within seconds (the raise is then a crash: the launcher stops the rest).
RAISED_EVERYWHERE_S = 8


def _raised_everywhere(run_name: str, step: int) -> bool:
  """Whether every process's step `step` of `run_name` raised too (always
  in one process): then the raise is the port's verdict everywhere; else
  the peers wait in the step's collectives and it is a crash."""
  return distributed.all_reach(f"raised-{run_name}-{step}",
                               RAISED_EVERYWHERE_S)


def _record_history(plan, run, step):
  run.history.append(run_metrics.history_line(
      step, run.since_eval, _evaluate(plan, run, plan.test_batch)))
  run.since_eval = []


def train(plan, config, n_devices: int, progress: bool = False,
          switch_at=None, check_every: int = 1):
  """Trains every run of `plan` in lockstep.

  With `switch_at` the port's runs restore pmap's checkpoint of that step
  and continue from it (`compare._src.prove.switch`). Every `check_every`-th step each
  run also steps from the reference's state (`compare._src.prove.lockstep`).

  Returns:
    What it found, as `Trained`.
  """
  runs = _setup(plan, config, n_devices)
  names = {run.name for run in runs}
  pairs = [(a, b) for a, b in plan.pairs if a in names and b in names]
  checks = lockstep.Lockstep(
      [run for run in runs if run.perturbation is None], pairs,
      check_every, config.steps, n_devices, rows,
      truth=plan.truth, perturbation=plan.lockstep_perturbation,
      port_runs=plan.port_runs, witness=plan.witness,
      multiple=judging.LOCKSTEP_MULTIPLE)
  tracked = pairs + [(plan.truth, run.name) for run in runs
                     if run.perturbation is not None]
  drift = {f"{a}~{b}": [] for a, b in tracked}
  diverged, raised, first_steps = {}, {}, None
  progress_lines.phase(f"training {config.steps} steps, every run from the "
                       "same state on the same batches, checked in lockstep")
  for i, host_batch in enumerate(tqdm.tqdm(
      plan.train_batches(), total=config.steps, desc=plan.name,
      file=sys.stderr,
      disable=not (progress and progress_lines.bar_shown()))):
    progress_lines.step(i + 1, config.steps)
    checks.before_step(i + 1, host_batch)
    fetched = {}  # by id: this step's host states, whether finite
    for run in runs:
      try:
        finite = _step(run, host_batch, i, n_devices, fetched)
      except Exception as err:  # pylint: disable=broad-except
        if (run.name not in plan.port_runs or run.perturbation is not None
            or not _raised_everywhere(run.name, i + 1)):
          err.add_note(f"in {run.name}'s step {i + 1}")  # the crash's line
          raise
        # A port's step that raises where pmap's runs fails at that step:
        # a verdict, not a crash of the proof.
        text = str(err).strip().splitlines()
        raised[run.name] = (i + 1, f"{type(err).__name__}: "
                            f"{text[0] if text else ''}"[:160])
        diverged[run.name] = i + 1
        break
      if not finite:
        diverged[run.name] = i + 1
      elif (i + 1) % plan.eval_every == 0 or i + 1 == config.steps:
        _record_history(plan, run, i + 1)
    by_name = {run.name: run for run in runs}
    if raised:
      break
    for a, b in tracked:
      drift[f"{a}~{b}"].append(equivalence.max_abs_difference(
          by_name[a].host["params"], by_name[b].host["params"]))
    if i == 0:  # judged at the end; no host copy kept till then
      first_steps = equivalence.compare_pairs(
          pairs, {run.name: run.host for run in runs},
          plan.tolerances["first_step"], checks.shared)
    if diverged:
      break
    checks.after_step(i + 1, host_batch)
    if switch_at == i + 1:
      by_name[switch.SOURCE].handover = switch.switch(plan, config, runs,
                                                      i + 1)
  for run in runs:
    run.summary = (run.history[-1] if run.history and not diverged else
                   _evaluate(plan, run, plan.test_batch))
  if not diverged:
    checks.evaluate_shared(config.steps, lambda run, state: _evaluate(
        plan, run, plan.test_batch, state))
  return Trained(runs, pairs, drift, diverged, checks, raised, first_steps)
