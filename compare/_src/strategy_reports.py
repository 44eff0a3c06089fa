"""What `python -m compare --strategy S` prints and records beyond the proof.

The engine proves every program the same way and knows nothing of what
one of our strategies shows about itself: its config in the report's
header (K and the loop, the members), its own lines (accumulation's temp
memory, fsdp's state per device and collectives, the ensemble's accuracy
beside its members'), the plot's member curves and what its losses mean.
The CLI adds them here, by the strategy's name, around the engine's report.
"""

import dataclasses
from collections.abc import Callable

from compare._src.measure.speed_ratio import throughput_ratio
from shardport.strategies.fsdp import BASELINE as FSDP_BASELINE
from shardport.strategies.fsdp import MEMORY_TARGET

DEFAULT_LOSS = (
    "train loss as the classic program reports it: the cross entropy "
    "summed over each device's batch, averaged over devices (sum / "
    "n_devices), so it grows with the per-device batch; test loss is the "
    "mean per example")
ENSEMBLE_LOSS = ("each member's mean cross entropy over the batch, "
                 "averaged over members; test loss likewise")
# The accumulation runs that take K calls per optimiser step.
ACCUMULATING = ("pmap", "shard_map", "jit")


@dataclasses.dataclass(frozen=True)
class StrategyReport:
  """One strategy's additions to the report.

  Attributes:
    fields: config -> fields added to the report's top level.
    lines: the finished report -> printed lines only this strategy has.
    run_fields: `(config, run name) -> fields` added to one run's entry.
    loss_convention: what the reported losses are, in one sentence.
    plot_members: whether `--plot` draws every member's test accuracy.
  """

  fields: Callable[[object], dict] = lambda config: {}
  lines: Callable[[dict], list[str]] = lambda report: []
  run_fields: Callable[[object, str], dict] = lambda config, name: {}
  loss_convention: str = DEFAULT_LOSS
  plot_members: bool = False


def of(name: str) -> StrategyReport:
  """The additions of strategy `name` (none beyond the defaults for most)."""
  return _REPORTS.get(name, StrategyReport())


def with_additions(name: str, config, report: dict) -> dict:
  """`report` with strategy `name`'s fields, run fields and loss convention."""
  extra = of(name)
  runs = {run: {**fields, **extra.run_fields(config, run)}
          for run, fields in report["runs"].items()}
  return {**report, **extra.fields(config), "runs": runs,
          "loss_convention": extra.loss_convention}


def _accumulation_fields(config) -> dict:
  """K, the loop, and the calls that make one optimiser step."""
  from shardport.workloads import microbatches  # pylint: disable=g-import-not-at-top
  return {"accum_steps": config.accum_steps,
          "accum_loop": config.accum_loop,
          "calls_per_step": microbatches.calls_per_step(config)}


def _accumulation_run_fields(config, name: str) -> dict:
  """Each run's microbatch loop; None for the runs that do not accumulate."""
  return {"accum_loop": config.accum_loop if name in ACCUMULATING else None}


def _accumulation_lines(report: dict) -> list[str]:
  """Accumulation's point: its temp memory against the full-batch steps."""
  runs = report["runs"]
  temp = lambda name: runs[name].get("memory", {}).get("temp_bytes")
  lines = []
  for name in ACCUMULATING:
    if name not in runs or "reference" not in runs or not temp(name):
      continue
    same = f"dp_{name}" if f"dp_{name}" in runs else None
    lines.append(
        f"temp memory {name} (K={report['accum_steps']}, "
        f"{runs[name]['accum_loop']}): "
        f"{temp(name) / temp('reference'):.2f}x the one-device full batch"
        + (f", {temp(name) / temp(same):.2f}x the data-parallel step on "
           "the same devices" if same else ""))
  return lines


def _ensemble_lines(report: dict) -> list[str]:
  """The ensemble's test accuracy beside its mean and best member's."""
  lines = []
  for name, run in report["runs"].items():
    if run.get("ensemble_accuracy") is None:
      continue
    verdict = ("beats" if run["ensemble_accuracy"] >
               run["best_member_accuracy"] else "does NOT beat")
    lines.append(
        f"{name:<10} ensemble test accuracy {run['ensemble_accuracy']:.4f} "
        f"{verdict} its best member {run['best_member_accuracy']:.4f} "
        f"(mean member {run['mean_member_accuracy']:.4f})")
  return lines


def _ensemble_data_lines(report: dict) -> list[str]:
  """The mesh, then the ensemble's test accuracy beside its members'."""
  members = report["members"]
  return [f"mesh: {members} members x {report['devices'] // members} data "
          "devices, each member's batch split over its row",
          *_ensemble_lines(report)]


def _fsdp_lines(report: dict) -> list[str]:
  """Each port's state per device against data_parallel's, its collectives
  and its speed over data_parallel's."""
  runs, n = report["runs"], report["devices"]
  base = runs.get(FSDP_BASELINE, {})
  full = base.get("state_bytes_per_device")
  lines = [_collectives_line(FSDP_BASELINE, base)] if base else []
  for name, run in runs.items():
    mine = run.get("state_bytes_per_device")
    if not mine or not full or name in (FSDP_BASELINE, "reference"):
      continue
    ratio = mine / full
    ok = ratio <= 1 / n + MEMORY_TARGET
    lines.append(
        f"{name:<13} params+opt state per device {mine} B = {ratio:.3f}x "
        f"{FSDP_BASELINE}'s {full} B (target <= 1/{n} + {MEMORY_TARGET:g} = "
        f"{1 / n + MEMORY_TARGET:.3f}: {'met' if ok else 'NOT met'})")
    lines.append(_collectives_line(name, run))
    speed = throughput_ratio({**report,
                              "throughput_pair": (FSDP_BASELINE, name)})
    if speed:
      lines.append(
          f"{'':<13} examples/s over {FSDP_BASELINE}'s, window by window: "
          f"median {speed['median']:.3f}, quartiles "
          f"{speed['quartiles'][0]:.3f}-{speed['quartiles'][1]:.3f}")
  return lines


def _collectives_line(name, run):
  """What one step of `run` all-gathers, reduce-scatters and all-reduces,
  and any other collective the compiler chose."""
  counts = run.get("collectives_per_step") or {}
  sizes = run.get("collective_bytes_per_step") or {}
  shown = ("all-gather", "reduce-scatter", "all-reduce")
  shown += tuple(op for op in sizes if op not in shown and sizes[op])
  parts = [f"{op} {counts.get(op, 0)} x = {sizes.get(op, 0) / 1024:.1f} KiB"
           for op in shown]
  total = sum(sizes.values()) / 1024
  return (f"{name:<13} per step: {', '.join(parts)} (unsharded sizes; "
          f"{total:.1f} KiB in all)")


_REPORTS = {
    "accumulation": StrategyReport(fields=_accumulation_fields,
                                   lines=_accumulation_lines,
                                   run_fields=_accumulation_run_fields),
    "ensemble": StrategyReport(
        fields=lambda c: {"members": c.members, "epochs": c.epochs,
                          "member_loop": c.member_loop},
        lines=_ensemble_lines, loss_convention=ENSEMBLE_LOSS,
        plot_members=True),
    "ensemble_data": StrategyReport(
        fields=lambda c: {"members": c.members, "epochs": c.epochs},
        lines=_ensemble_data_lines, loss_convention=ENSEMBLE_LOSS,
        plot_members=True),
    "fsdp": StrategyReport(lines=_fsdp_lines),
}
