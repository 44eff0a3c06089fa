"""What a proof found: the verdicts, timing and report of a lockstep run.

`compare` trains every run (`runner.train`), then judges what the training
found (`verdicts`: the first step, the lockstep checks, a handover, the
end), times the runs unless asked not to (`compare._src.measure.timing`)
and assembles the report's fields. JSON-ready values only leave here.
"""

from compare._src.measure import timing
from compare._src.measure import utilisation
from compare._src.prove import progress as progress_lines
from compare._src.prove import runner
from compare._src.prove import switch
from compare._src.measure import state_bytes
from compare._src.prove import judging
from compare._src.prove import verdicts
from shardport.workloads import digest

_TIMING_BATCHES = 4


def measure_throughput(plan, runs, config, windows: int):
  """Interleaved examples/s of every run, from its final state (already
  read: the compiled step is specialised to its pytree's metadata)."""
  progress_lines.phase(f"timing: {windows} windows, the runs interleaved")
  host_batches = plan.timing_batches(_TIMING_BATCHES)
  timed = []
  for run in runs:
    placed = [run.module.put_batch(runner.rows(run, b), run.placement)
              for b in host_batches]
    timed.append(timing.Timed(run.name, run.step, run.state, placed))
  return timing.throughput(timed, config.global_batch, windows=windows)


def _run_report(config, run, speed):
  summary = {k: v for k, v in run.summary.items()
             if k not in ("step", "train_loss", "train_accuracy")}
  gflops = utilisation.achieved(run.compiled.get("flops_per_step"),
                                speed["examples_per_s"], config.global_batch)
  return {"variant": run.variant, **speed, "achieved_gflops": gflops,
          "compile_s": run.compile_s,
          "final_loss": run.losses[-1] if run.losses else float("nan"),
          **summary,
          "losses": run.losses,
          **run.compiled, "history": run.history,
          "state_digest": run.digest,
          "state_bytes_per_device": max(
              state_bytes.state_bytes_per_device(run.state).values(),
              default=0)}


def _calibration_report(plan, calibrations, drift):
  """The calibration runs, and their envelope: the largest drift per step
  (None without any: a Port asks for them, `compare.prove`)."""
  if not calibrations:
    return None
  samples = {run.name: {
      "perturbation": run.perturbation.describe(),
      "drift_per_step": drift.pop(f"{plan.truth}~{run.name}"),
      "summary": {k: run.summary.get(k) for k in plan.judged_metrics},
      "state_digest": digest.state_digest(run.host)} for run in calibrations}
  curves = [s["drift_per_step"] for s in samples.values()]
  return {"perturbation": plan.calibration_summary,
          "drift_per_step": [max(d) for d in zip(*curves)],
          "summaries": [s["summary"] for s in samples.values()],
          "samples": samples}


def compare(plan, config, n_devices: int, windows: int = 20,
            progress: bool = False, switch_at=None,
            check_every: int = 1) -> dict:
  """Trains, checks and times every run of `plan` (`plan.Plan`); returns
  the report's fields."""
  trained = runner.train(plan, config, n_devices, progress, switch_at,
                         check_every)
  runs, pairs, drift = trained.runs, trained.pairs, trained.drift
  diverged, raised = trained.diverged, trained.raised
  checks = trained.checks
  checks = checks.report(judging.LOCKSTEP_MULTIPLE, judging.LOCKSTEP_REASON)
  calibrations = [run for run in runs if run.perturbation is not None]
  runs = [run for run in runs if run.perturbation is None]
  for run in runs:  # before the timing's steps donate the states read
    run.digest = digest.state_digest(run.host)
  by_name = {run.name: run for run in runs}
  calibration_report = _calibration_report(plan, calibrations, drift)
  handed = (by_name[switch.SOURCE].handover if switch.SOURCE in by_name
            else None)
  # A port's step that raised stopped the runs at different steps: nothing
  # to pair (the verdict names the raise).
  results = [] if raised else verdicts.first_step(
      plan, pairs, None, checks if checks["checked_steps"] else None,
      measured=trained.first_steps)
  del checks["judged"]  # the leaf bands, in the report as leaf_bands
  if not raised:
    results += verdicts.lockstep(checks)
    results += verdicts.handover(handed)
    results += verdicts.final(
        plan, pairs, {r.name: r.host for r in runs}, drift,
        None if diverged else calibration_report,
        {r.name: r.summary for r in runs}, plan.test_size,
        checks.get("shared_eval"), config.steps)
  # No windows: the proof alone, as a CI run needs it (issue 57: the proof
  # within 1.5x the programs' own CPU time).
  speeds = ({run.name: timing.not_timed() for run in runs}
            if diverged or not windows
            else measure_throughput(plan, runs, config, windows))
  report = {
      "peak_gflops": (None if diverged or not windows
                      else utilisation.peak_gflops()),
      "runs": {run.name: _run_report(config, run, speeds[run.name])
               for run in runs},
      "calibration": calibration_report,
      # What --switch-at handed over (compare._src.prove.switch), else None.
      "switch": handed,
      "truth": plan.truth,
      "calibration_change": plan.calibration_change,
      "throughput_pair": list(plan.throughput_pair),
      "lockstep": checks,
      "skipped_runs": dict(plan.skipped),
      "equivalence": results,
      "verdict": verdicts.overall(results, diverged),
      "first_failure": verdicts.first_failure(results)}
  if diverged:
    report["diverged_at"] = min(diverged.values())
    report["diverged_runs"] = sorted(diverged)
  if raised:
    name, (step, error) = min(raised.items(), key=lambda kv: kv[1][0])
    report.update(verdict="fail", raised=raised, first_failure=(
        f"first at step {step}: {name}'s step raised where "
        f"{plan.truth}'s ran: {error}"))
  return report
