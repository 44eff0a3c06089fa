"""Runs every backend of a strategy over the same batches and compares them.

All runs start from the same initial state and train in lockstep on the same
host batches; after the first step and at the end their host states are
compared pairwise, and the largest parameter difference of every pair is
recorded at every step (the drift). Throughput is timed afterwards, interleaved
across runs (`compare.timing`).
"""

import dataclasses
import sys
import time

import jax
import numpy as np
import tqdm

from compare import equivalence
from compare import hlo
from compare import timing
from compare import tolerances
from compare.strategies import StrategySpec
from workloads import batches

_TIMING_BATCHES = 4


@dataclasses.dataclass
class Run:
  """One backend's run and what it measured."""

  name: str
  module: object
  variant: str
  placement: object = None
  state: object = None
  step: object = None
  evaluate: object = None
  compile_s: float = 0.0
  compiled: dict = dataclasses.field(default_factory=dict)
  losses: list = dataclasses.field(default_factory=list)
  since_eval: list = dataclasses.field(default_factory=list)
  first_step: object = None
  history: list = dataclasses.field(default_factory=list)
  summary: dict = dataclasses.field(default_factory=dict)


def _compile(run, batch):
  """Lowers and compiles the step; falls back to the plain callable.

  A module whose step is not one program (a sequential per-member reference)
  has no `.lower`; its compile time is then that of the first call.
  """
  start = time.perf_counter()
  if hasattr(run.step, "lower"):
    compiled = run.step.lower(run.state, batch).compile()
    run.compile_s = time.perf_counter() - start
    run.compiled = hlo.describe(compiled)
    # A step made of several calls (optax.MultiSteps: K per optimiser step)
    # runs its collectives that many times per step.
    calls = getattr(compiled, "calls_per_step", 1)
    run.compiled["collectives_per_step"] = {
        k: v * calls for k, v in run.compiled["collectives"].items()}
    return compiled
  return run.step


def _train_metrics(run, metrics):
  """The step's scalar metrics: `loss`, and `accuracy` where reported."""
  host = run.module.metrics_to_host(metrics)
  return {k: float(np.asarray(host[k])) for k in ("loss", "accuracy")
          if k in host and np.ndim(host[k]) == 0}


def _epoch_means(step_metrics):
  """Train metrics averaged since the last evaluation, as the HOWTO logs."""
  return {f"train_{k}": float(np.mean([m[k] for m in step_metrics]))
          for k in step_metrics[0]}


def _evaluate(spec, run, config, test_batch):
  sums = run.module.metrics_to_host(
      run.evaluate(run.state, run.module.put_batch(test_batch, run.placement)))
  return spec.summarize(sums, config)


def _setup(spec, config, n_devices):
  active = (spec.active_runs(config, n_devices) if spec.active_runs
            else tuple(r.name for r in spec.runs))
  runs = []
  for run_spec in spec.runs:
    if run_spec.name not in active:
      continue
    run = Run(run_spec.name, run_spec.module, run_spec.variant)
    run.placement = run.module.make_placement(n_devices)
    run.state = run.module.create_state(config.seed, config, run.placement)
    run.step = run.module.make_train_step(config, run.placement, run.variant)
    run.evaluate = run.module.make_evaluate(config, run.placement)
    runs.append(run)
  return runs


def _pairs(spec, runs):
  names = {run.name for run in runs}
  return [(a, b) for a, b in spec.pairs if a in names and b in names]


def train(spec: StrategySpec, config, data, n_devices: int,
          progress: bool = False):
  """Trains every active run in lockstep; returns the runs and the drift."""
  runs = _setup(spec, config, n_devices)
  pairs = _pairs(spec, runs)
  test_batch = batches.test_batch(data, n_devices)
  every = spec.eval_every(config, len(data.train_inputs)) if spec.eval_every else None
  drift = {f"{a}~{b}": [] for a, b in pairs}
  order = batches.train_batches(data, config.seed, config.global_batch,
                                config.steps)
  for i, host_batch in enumerate(tqdm.tqdm(
      order, total=config.steps, desc=spec.name, file=sys.stderr,
      disable=not progress)):
    hosts = {}
    for run in runs:
      batch = run.module.put_batch(host_batch, run.placement)
      if i == 0:
        run.step = _compile(run, batch)
      run.state, metrics = run.step(run.state, batch)
      run.since_eval.append(_train_metrics(run, metrics))
      run.losses.append(run.since_eval[-1]["loss"])
      hosts[run.name] = run.module.to_host(run.state)
      if i == 0:
        run.first_step = hosts[run.name]
      if every and (i + 1) % every == 0:
        run.history.append({"step": i + 1, **_epoch_means(run.since_eval),
                            **_evaluate(spec, run, config, test_batch)})
        run.since_eval = []
    for a, b in pairs:
      drift[f"{a}~{b}"].append(equivalence.max_abs_difference(
          hosts[a]["params"], hosts[b]["params"]))
  finals = {run.name: hosts[run.name] for run in runs}
  for run in runs:
    run.summary = _evaluate(spec, run, config, test_batch)
  return runs, finals, drift, pairs


def check(spec, runs, finals, drift, pairs):
  """Pairwise verdicts after the first step and at the end."""
  by_name = {run.name: run for run in runs}
  results = []
  for at in ("first_step", "final"):
    tol = tolerances.get(spec.name, at)
    for a, b in pairs:
      sides = ((by_name[a].first_step, by_name[b].first_step)
               if at == "first_step" else (finals[a], finals[b]))
      result = {"a": a, "b": b, "at": at,
                **equivalence.compare_trees(*sides, tol)}
      if at == "final":
        result["drift_per_step"] = drift[f"{a}~{b}"]
      results.append(result)
  return results


def measure_throughput(runs, config, data, windows: int):
  """Interleaved examples/s of every run, continuing from its final state.

  The final state (already fetched and evaluated) is reused rather than a
  fresh one because the compiled step is specialised to its pytree metadata.
  """
  host_batches = list(batches.train_batches(
      data, config.seed + 1, config.global_batch, _TIMING_BATCHES))
  timed = []
  for run in runs:
    placed = [run.module.put_batch(b, run.placement) for b in host_batches]
    timed.append(timing.Timed(run.name, run.step, run.state, placed))
  return timing.throughput(timed, config.global_batch, windows=windows)


def compare(spec: StrategySpec, config, data, n_devices: int,
            windows: int = 20, progress: bool = False) -> dict:
  """Trains, checks and times every run; returns the report's fields."""
  runs, finals, drift, pairs = train(spec, config, data, n_devices,
                                        progress)
  verdicts = check(spec, runs, finals, drift, pairs)
  speeds = measure_throughput(runs, config, data, windows)
  report_runs = {}
  for run in runs:
    report_runs[run.name] = {
        "variant": run.variant,
        **speeds[run.name],
        "compile_s": run.compile_s,
        "final_loss": run.losses[-1],
        **run.summary,
        "losses": run.losses,
        **run.compiled,
        **({"history": run.history} if run.history else {}),
        **(spec.run_fields(config, run.name) if spec.run_fields else {}),
    }
  skipped = {r.name: spec.why_skipped(config, n_devices)
             for r in spec.runs
             if r.name not in report_runs and spec.why_skipped}
  return {"runs": report_runs, "skipped_runs": skipped, "equivalence": verdicts,
          "verdict": ("fail" if any(v["verdict"] == equivalence.DIFFER
                                    for v in verdicts) else "pass")}
