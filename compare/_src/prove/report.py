"""The printed table and the verdict lines (the JSON: `shardport.launch.files`).

Generic: what only one strategy reports comes from its `report_lines`.
"""

import textwrap

from compare._src.prove import equivalence
from compare._src.prove import leaf_bands
from shardport.strategies.throughput import throughput_ratio

SCHEMA = 2
# Every line the report prints fits this many columns (issue 59); the JSON
# keeps each field in full.
WIDTH = 100
# shard_map must keep at least this share of pmap's throughput (issue 2).
THROUGHPUT_FLOOR = 0.97


def _fmt(value, spec):
  return "-" if value is None else format(value, spec)


def fit(line: str, indent: int | None = None) -> list[str]:
  """`line` as lines of at most `WIDTH` columns.

  Args:
    line: one line of the report.
    indent: the continuation lines' indent; by default the line's own
      indent plus four, so a continuation never reads as a line of its own.

  Returns:
    `[line]` when it fits, else its words wrapped, never split at a hyphen
    ("1.2e-07" and "24976-36859" stay whole).
  """
  if len(line) <= WIDTH:
    return [line]
  if indent is None:
    indent = len(line) - len(line.lstrip(" ")) + 4
  return textwrap.wrap(line, WIDTH, subsequent_indent=" " * indent,
                       break_on_hyphens=False)


def header(report: dict) -> str:
  """The run's one-line description."""
  return (f"{report['strategy']} / {report['workload']} on "
          f"{report['dataset']}: {report.get('processes', 1)} process(es) x "
          f"{report['devices'] // report.get('processes', 1)} "
          f"{report['platform']} devices, jax {report['jax_version']} "
          f"(pmap runtime: {report.get('pmap_runtime', '?')}), "
          f"{report['steps']} steps, global batch {report['global_batch']}, "
          f"seed {report['seed']}"
          + (f", negative control {report['negative_control']}"
             if report.get("negative_control") else ""))


# "coll KiB": every collective's bytes one step moves, each at the
# unsharded size it works on (`compare._src.measure.hlo`): where a jit port places
# more than its shard_map twin, this column shows it.
COLUMNS = ("run", "examples/s", "spread (min-max)", "% peak", "compile s",
           "final loss", "test acc", "all-reduce", "all-gather", "coll KiB",
           "temp MiB")


def run_rows(report: dict) -> list[list[str]]:
  """One row of `COLUMNS` per run, formatted."""
  rows = []
  for name, run in report["runs"].items():
    lo, hi = run["examples_per_s_spread"]
    collectives = run.get("collectives_per_step", run.get("collectives", {}))
    temp = run.get("memory", {}).get("temp_bytes")
    moved = run.get("collective_bytes_per_step")
    peak = report.get("peak_gflops")
    share = (100 * run["achieved_gflops"] / peak
             if run.get("achieved_gflops") and peak else None)
    rows.append([
        name, _fmt(run["examples_per_s"], ".0f"),
        "-" if lo is None else f"{lo:.0f}-{hi:.0f}", _fmt(share, ".1f"),
        f"{run['compile_s']:.2f}", f"{run['final_loss']:.4f}",
        _fmt(run.get("test_accuracy"), ".4f"),
        _fmt(collectives.get("all-reduce"), "d"),
        _fmt(collectives.get("all-gather"), "d"),
        _fmt(None if moved is None else sum(moved.values()) / 2**10, ".1f"),
        _fmt(None if temp is None else temp / 2**20, ".2f")])
  return rows


def _runs_table(report):
  rows = run_rows(report)
  needed = [max(len(c) for c in column) for column in zip(_SHORT, *rows)]
  widths = [max(w, n) for w, n in zip(_WIDTHS, needed)]
  # A long run name ("dp_shard_map") or rate widens its column: the other
  # columns then shrink to their contents, so the row still fits.
  if sum(widths) + len(widths) - 1 > WIDTH:
    widths = needed
  line = lambda cells: " ".join(
      f"{c:<{w}}" if i == 0 else f"{c:>{w}}"
      for i, (c, w) in enumerate(zip(cells, widths)))
  head = line(_SHORT)
  return [head, "-" * len(head)] + [line(r) for r in rows]


def _history(report):
  """One line per run: its test accuracy (or loss) at each evaluation."""
  lines = []
  for name, run in report["runs"].items():
    history = run.get("history", [])
    if not history:
      continue
    key = next((k for k in ("test_accuracy", "test_loss")
                if history[0].get(k) is not None), "train_loss")
    points = " ".join(f"{e['step']}:{_fmt(e.get(key), '.3f')}"
                      for e in history)
    lines += textwrap.wrap(f"{name:<12} {key} by step: {points}", WIDTH,
                           subsequent_indent=" " * 13)
  return lines


# Where `_pair_line`'s detail starts, after the pair, the check, the verdict.
_PAIR_DETAIL = 10 + 4 + 13 + 1 + 10 + 1 + 7 + 1


def _pair_line(v):
  """One pair at one check."""
  head = f"{v['a']:>10} vs {v['b']:<13} {v['at']:<10} {v['verdict']:<7} "
  if v["at"] == "switch":
    return head + (f"the state restored at step {v['step']} "
                   + ("is" if v["verdict"] == "bitwise" else "is NOT")
                   + f" {v['b']}'s (digest)")
  if v["at"] == "lockstep":
    return head + (
        f"at most {v['max_ratio']:.2f}x the one-step band (step "
        f"{v['worst_step']}), allowed {v['allowed_ratio']:g}x"
        + (f"; first over at step {v['first_fail_step']} "
           f"({v['first_fail_ratio']:.3g}x)" if v["first_fail_step"] else "")
        + (f"; a rounding flip at step(s) {_steps(v['flip_steps'])} "
           "(excused: two programs, every port run took pmap's step or, "
           "on batches nudged by a few ulps, the truth's)"
           if v.get("flip_steps") else ""))
  if "band_ratio" in v:
    return head + (f"{v['band_ratio']:.2f}x band (allowed "
                   f"{v['allowed_ratio']:g}x), max_abs={v['max_abs']:.1e} "
                   f"max_ulp={v['max_ulp']}"
                   # The first step is lockstep's step 1: its flip rule.
                   + ("; a rounding flip (excused as lockstep's step 1 is)"
                      if v.get("flip_steps") else ""))
  return head + (f"max_abs={v['max_abs']:.1e} max_ulp={v['max_ulp']}"
                 + (f" (rtol {v['rtol']:g}, atol {v['atol']:g}*max)"
                    if v["at"] == "first_step" and v["verdict"] != "bitwise"
                    else ""))


def _steps(steps):
  shown = ", ".join(str(t) for t in steps[:5])
  return shown + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")


def _lockstep_lines(report):
  checks = report.get("lockstep")
  if not checks:
    return []
  truth = report.get("truth", "reference")
  change = report.get("calibration_change", "its rows reordered")
  lines = [f"lockstep: {checks['checked_steps']} of {report['steps']} steps "
           f"checked (step 1, every {checks['check_every']}, the last), each "
           f"run's step from the {truth}'s state against the {truth}'s "
           f"step with {change}: "
           # A report measured before the leaves had bands of their own
           # (docs/measured) says what its run did: one band.
           + (f"each leaf judged against its own band, the largest "
              if "leaves" in checks else "band ")
           + f"{checks['band']:.2e} of the update; "
           f"{checks['extra_steps']} extra steps, "
           f"{checks['seconds']:.1f} s"]
  if checks.get("leaves") is not None:
    unjudged = checks.get("unjudged_leaves") or {}
    lines.append(
        f"judged {checks['judged_leaves']} of {checks['leaves']} leaves"
        + ("" if not unjudged else
           f"; not judged, rounding moves them by {leaf_bands.UNJUDGEABLE:g}"
           " of their update or more (e.g. a bias before a BatchNorm): "
           + ", ".join(f"{leaf} (band {band:.2g})"
                       for leaf, band in list(unjudged.items())[:4])
           + (f" and {len(unjudged) - 4} more" if len(unjudged) > 4
              else "")))
  if checks.get("band_flip_steps"):
    lines.append(f"calibration flipped at step(s) {checks['band_flip_steps']}"
                 f" (over {leaf_bands.CALIBRATION_FLIP:g}x the steps' median "
                 f"and {leaf_bands.CALIBRATION_FLIP_LEVEL:g} of the update): "
                 "left out of the band")
  flipped = {name.replace("~", " vs "): pair.get("sign_flips") for name, pair
             in checks["pairs"].items()}
  flipped["calibration"] = checks.get("band_sign_flips")
  flipped = {name: steps for name, steps in flipped.items() if steps}
  if flipped:
    lines.append(
        "sign flips left out of a leaf's error (elements whose two updates "
        f"point opposite ways, at most {equivalence.SIGN_FLIP_SHARE:g} of "
        "the leaf): " + "; ".join(
            f"{name} {max(steps.values())} element(s) at most, at step(s) "
            f"{_steps_text(steps)}" for name, steps in flipped.items()))
  for name, pair in checks["pairs"].items():
    if pair["stopped_bitwise_at"]:
      a, b = name.split("~")
      lines.append(f"{a} vs {b}: bitwise for "
                   f"{pair['stopped_bitwise_at'] - 1} steps, differs from "
                   f"step {pair['stopped_bitwise_at']}")
  return lines


def _steps_text(steps) -> str:
  """A few step numbers, then how many more."""
  steps = sorted(int(t) for t in steps)
  return ", ".join(map(str, steps[:6])) + (
      f" and {len(steps) - 6} more" if len(steps) > 6 else "")


def _final_line(v):
  """A final pair: each run's evaluation of one state (judged), then the
  free-running runs' metrics and drift (shown, not judged)."""
  parts = []
  shared = v.get("shared_eval")
  if shared and shared["metrics"]:
    parts.append(f"step {shared['step']}'s shared state evaluated by each: "
                 + ", ".join(f"{k} gap {m['gap']:.2e} (allowed "
                             f"{m['allowed']:.1e})"
                             for k, m in shared["metrics"].items()))
  cal = v.get("calibration")
  if cal:
    parts.append("free-running " + ", ".join(
        f"{k} gap {m['gap']:.2e} vs calibration spread "
        f"{m['calibration_spread']:.2e}" for k, m in cal["metrics"].items())
        + f", drift at most {cal['max_ratio']:.2f}x the calibration band "
        f"(step {cal['worst_step']}; shown, not judged)")
  return f"final {v['a']}~{v['b']}: " + "; ".join(parts) if parts else None


def verdict_lines(report: dict, wrap: bool = False) -> list[str]:
  """One line per pair and check, the lockstep checks, then each final
  pair's calibration.

  Args:
    report: the report (`shardport.launch.files`' JSON).
    wrap: whether a pair's detail wraps under its own column (`table`);
      the appendix shows each pair on one line.
  """
  lines = [text for v in report["equivalence"]
           for text in (fit(_pair_line(v), indent=_PAIR_DETAIL) if wrap
                        else [_pair_line(v)])]
  lines += _lockstep_lines(report)
  for v in report["equivalence"]:
    if v["at"] == "final":
      line = _final_line(v)
      if line:
        lines.append(line)
  curve = (report.get("calibration") or {}).get("drift_per_step")
  if curve:
    truth = report.get("truth", "reference")
    lines.append(f"calibration ({truth} vs {truth}, "
                 f"{report.get('calibration_change', 'its rows reordered')}, "
                 f"largest of {len(report['calibration'].get('samples', [1]))}"
                 "): "
                 f"step 1 {curve[0]:.2e}, step {len(curve)} {curve[-1]:.2e}, "
                 f"largest {max(curve):.2e}")
  return lines


# The printed table's column names, narrower than `COLUMNS` (the guide's):
# the first screen fits 100 columns; `LEGEND` spells them out.
_SHORT = ("run", "ex/s", "min-max", "% peak", "compile", "loss",
          "test acc", "reduce", "gather", "coll KiB", "temp MiB")
_WIDTHS = (10, 7, 15, 6, 7, 8, 8, 6, 6, 8, 8)

LEGEND = (
    "legend: ex/s examples per second (median of the timing windows; "
    "min-max their spread);",
    "  compile: seconds to compile the step, apart from the timing (pmap "
    "compiles inside its first",
    "  call); reduce/gather: all-reduces and all-gathers a step runs; coll "
    "KiB: the bytes they move;",
    "  bitwise: every bit equal; close: within the allowance; band (the "
    "one-step band): what",
    "  rounding alone moves a step's result; a pair may differ by up to "
    "10x it;",
    "  lockstep: at each step every run takes the step from one shared "
    "state, so a mistake shows",
    "  at its step; nudged by one ulp: the batch moved by rounding only, to "
    "measure the band;",
    "  shown, not judged: printed for reading, not part of the verdict; "
    "max_ulp: the largest",
    "  difference in units in the last place (large near zero, so not "
    "judged by itself).")


def _pair_summaries(report: dict) -> list[str]:
  """One line per pair: its worst check, with the allowance beside it."""
  pairs = {}
  for v in report.get("equivalence", []):
    pairs.setdefault((v["a"], v["b"]), []).append(v)
  lines = []
  for (a, b), checks in pairs.items():
    failed = [v for v in checks if v["verdict"] == "differ"]
    ratios = [v.get("max_ratio", v.get("band_ratio")) for v in checks
              if v.get("max_ratio", v.get("band_ratio")) is not None]
    allowed = next((v["allowed_ratio"] for v in checks
                    if v.get("allowed_ratio")), None)
    if failed:
      v = failed[0]
      where = v.get("first_fail_step") or v.get("step")
      text = (f"DIFFERS at the {v['at'].replace('_', ' ')} check"
              + (f", step {where}" if where else ""))
    elif all(v["verdict"] == "bitwise" for v in checks):
      text = f"bitwise at every check ({len(checks)})"
    else:
      flips = sorted({t for v in checks for t in v.get("flip_steps") or ()})
      text = ("close" + (f": at most {max(ratios):.2f}x its band (allowed "
                         f"{allowed:g}x)" if ratios and allowed else "")
              # Over the allowance only where a flip was excused: say so.
              + (f", a rounding flip excused at step(s) {_steps(flips)}"
                 if flips else ""))
    lines += fit(f"  {a + ' vs ' + b:<24} {text}", indent=27)
  return lines


def summary(report: dict) -> list[str]:
  """The first screen: the verdict, one line per pair, the speed."""
  failure = report.get("first_failure")
  lines = [f"VERDICT: {report['verdict']}"
           + (f", {failure}" if failure else ""), *_pair_summaries(report)]
  ratio = throughput_ratio(report)
  if ratio is not None:
    legacy, port = report.get("throughput_pair", ("pmap", "shard_map"))
    lo, hi = ratio["quartiles"]
    lines.append(f"  speed: {port} {ratio['median']:.3f}x {legacy}'s "
                 f"examples/s ({lo:.3f}-{hi:.3f}; target {THROUGHPUT_FLOOR}"
                 + (": ok)" if ratio["median"] >= THROUGHPUT_FLOOR
                    else ": below, not judged)"))
  return lines + ["  (the details follow; terms: the legend at the end)", ""]


def table(report: dict, strategy_lines: list[str] = ()) -> str:
  """The whole printed report: the summary first, then the details."""
  lines = [*summary(report), *textwrap.wrap(header(report), WIDTH,
                                            subsequent_indent="  "),
           *_runs_table(report)]
  if report.get("matmul_precision_note"):
    lines += textwrap.wrap(report["matmul_precision_note"], WIDTH,
                           subsequent_indent="  ")
  if report.get("peak_gflops"):
    lines += textwrap.wrap(
        f"% peak: achieved GFLOP/s (cost analysis x steps/s) over the f32 "
        f"matmul peak measured now, {report['peak_gflops']:.0f} GFLOP/s",
        WIDTH, subsequent_indent="  ")
  for name, why in report.get("skipped_runs", {}).items():
    lines.append(f"{name:<12} not run: {why}")
  lines += ["", *_history(report), "", *strategy_lines,
            *verdict_lines(report, wrap=True)]
  ratio = throughput_ratio(report)
  if ratio is not None:
    mark = ("ok" if ratio["median"] >= THROUGHPUT_FLOOR
            else "below target; speed is not part of the verdict")
    lo, hi = ratio["quartiles"]
    legacy, port = report.get("throughput_pair", ("pmap", "shard_map"))
    lines.append(f"{port}/{legacy} examples/s, window by window: median "
                 f"{ratio['median']:.3f}, quartiles {lo:.3f}-{hi:.3f} "
                 f"(target >= {THROUGHPUT_FLOOR}: {mark})")
  if report.get("diverged_at"):
    lines.append(f"training diverged at step {report['diverged_at']} in "
                 f"{', '.join(report['diverged_runs'])} (non-finite loss or "
                 "parameters)")
  failure = report.get("first_failure")
  checks = report.get("lockstep") or {}
  judged = (f" ({checks['judged_leaves']} of {checks['leaves']} leaves "
            "judged)" if checks.get("leaves") is not None else "")
  lines += LEGEND
  lines.append(f"verdict: {report['verdict']}"
               + (f", {failure}" if failure else "") + judged)
  # Each line wrapped (a final pair's line ran to 351 columns); what a
  # strategy adds (`report_lines`) too.
  return "\n".join(text for line in lines for text in fit(line))
