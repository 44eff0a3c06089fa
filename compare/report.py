"""The printed table, the verdict lines and the atomically written JSON."""

import json
import os
import statistics
import tempfile

SCHEMA = 1
# shard_map must keep at least this share of pmap's throughput (issue 2).
THROUGHPUT_FLOOR = 0.97


def _fmt(value, spec):
  return "-" if value is None else format(value, spec)


def throughput_ratio(report: dict) -> dict | None:
  """shard_map's examples/s over pmap's, window by window, when both ran.

  Each timing window times both runs back to back, so the ratio within a
  window cancels the machine's slow drifts; the median and quartiles over
  windows are far steadier than a ratio of two medians (measured on 2 cores
  with 8 emulated devices: quartiles within ~5%, where per-run spreads
  reach 30%).
  """
  runs = report["runs"]
  if "pmap" not in runs or "shard_map" not in runs:
    return None
  ratios = [b / a for a, b in zip(runs["pmap"]["window_examples_per_s"],
                                  runs["shard_map"]["window_examples_per_s"])]
  quartiles = (statistics.quantiles(ratios, n=4) if len(ratios) > 1
               else [ratios[0]] * 3)
  return {"median": statistics.median(ratios),
          "quartiles": [quartiles[0], quartiles[2]]}


def table(report: dict) -> str:
  """One row per run, then the verdicts and the throughput ratio."""
  head = (f"{'run':<12} {'examples/s':>11} {'spread (min-max)':>19} "
          f"{'compile s':>9} {'final loss':>10} {'test acc':>8} "
          f"{'all-reduce':>10} {'all-gather':>10} {'temp MB':>8}")
  lines = [
      f"{report['strategy']} / {report['workload']} on {report['dataset']}: "
      f"{report['devices']} {report['platform']} devices, jax "
      f"{report['jax_version']}, {report['steps']} steps, global batch "
      f"{report['global_batch']}, seed {report['seed']}", head,
      "-" * len(head)]
  for name, run in report["runs"].items():
    lo, hi = run["examples_per_s_spread"]
    collectives = run.get("collectives", {})
    temp = run.get("memory", {}).get("temp_bytes")
    loss = run["final_loss"]
    loss = loss if isinstance(loss, float) else sum(loss) / len(loss)
    lines.append(
        f"{name:<12} {run['examples_per_s']:>11.0f} "
        f"{f'{lo:.0f}-{hi:.0f}':>19} {run['compile_s']:>9.2f} "
        f"{loss:>10.4f} {_fmt(run.get('test_accuracy'), '.4f'):>8} "
        f"{_fmt(collectives.get('all-reduce'), 'd'):>10} "
        f"{_fmt(collectives.get('all-gather'), 'd'):>10} "
        f"{_fmt(None if temp is None else temp / 2**20, '.2f'):>8}")
  for name, why in report.get("skipped_runs", {}).items():
    lines.append(f"{name:<10} not run: {why}")
  lines.append("")
  lines += _history(report)
  lines += _members(report)
  for v in report["equivalence"]:
    lines.append(
        f"{v['a']:>9} vs {v['b']:<9} {v['at']:<10} {v['verdict']:<7} "
        f"max_abs={v['max_abs']:.2e} max_rel={v['max_rel']:.2e} "
        f"max_ulp={v['max_ulp']} (rtol={v['rtol']:g}, "
        f"atol={v['atol']:g}*max|leaf|)")
  for v in report["equivalence"]:
    drift = v.get("drift_per_step")
    if drift:
      lines.append(f"drift {v['a']}~{v['b']} (max |params| difference): "
                   f"step 1 {drift[0]:.2e}, step {len(drift)} {drift[-1]:.2e},"
                   f" largest {max(drift):.2e}")
  lines += _memory(report)
  ratio = throughput_ratio(report)
  if ratio is not None:
    mark = "ok" if ratio["median"] >= THROUGHPUT_FLOOR else "BELOW TARGET"
    lo, hi = ratio["quartiles"]
    lines.append(f"shard_map/pmap examples/s, window by window: median "
                 f"{ratio['median']:.3f}, quartiles {lo:.3f}-{hi:.3f} "
                 f"(target >= {THROUGHPUT_FLOOR}: {mark})")
  lines.append(f"verdict: {report['verdict']}")
  return "\n".join(lines)


_HISTORY_FIELDS = ("train_loss", "train_accuracy", "test_loss",
                   "test_accuracy", "mean_member_accuracy")


def _history(report):
  """Per-evaluation lines (per epoch for the ensemble), as the HOWTO logs."""
  lines = []
  for name, run in report["runs"].items():
    for epoch, entry in enumerate(run.get("history", []), start=1):
      fields = ", ".join(f"{k} {_fmt(entry[k], '.4f')}"
                         for k in _HISTORY_FIELDS if k in entry)
      lines.append(f"{name:<10} epoch {epoch:>2} (step {entry['step']:>4}): "
                   f"{fields}")
  return lines + ([""] if lines else [])


def _members(report):
  """The ensemble's test accuracy beside its mean and best member's."""
  lines = []
  for name, run in report["runs"].items():
    if "ensemble_accuracy" in run:
      verdict = ("beats" if run["ensemble_accuracy"] >
                 run["mean_member_accuracy"] else "does NOT beat")
      lines.append(
          f"{name:<10} ensemble test accuracy {run['ensemble_accuracy']:.4f} "
          f"{verdict} the mean member {run['mean_member_accuracy']:.4f} "
          f"(best member {run['best_member_accuracy']:.4f})")
  return lines + ([""] if lines else [])


def _memory(report):
  """Accumulation's point: its temp memory against the full-batch steps."""
  runs = report["runs"]
  if "accum_steps" not in report or "reference" not in runs:
    return []
  temp = lambda name: runs[name]["memory"]["temp_bytes"]
  lines = []
  for name in ("pmap", "shard_map", "jit"):
    if name in runs:
      same = f"dp_{name}" if f"dp_{name}" in runs else None
      lines.append(
          f"temp memory {name} (K={report['accum_steps']}, "
          f"{runs[name].get('accum_loop')}): {temp(name) / temp('reference'):.2f}"
          f"x the one-device full batch"
          + (f", {temp(name) / temp(same):.2f}x the data-parallel step on the"
             " same devices" if same else ""))
  return lines


def check_writable(path: str) -> None:
  """Raises OSError now if `path` cannot be written later."""
  folder = os.path.dirname(os.path.abspath(path))
  if os.path.isdir(path):
    raise OSError(f"--json {path} is a directory")
  if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
    raise OSError(f"--json {path}: cannot write in {folder}")


def write_json(report: dict, path: str) -> None:
  """Writes the report to `path` atomically (temp file, then rename)."""
  folder = os.path.dirname(os.path.abspath(path))
  with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp",
                                   delete=False) as f:
    json.dump(report, f, indent=1)
  os.replace(f.name, path)
