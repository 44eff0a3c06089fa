"""Tables the guide renders from the strategy registry and the measurements.

- `<!-- table: measured -->`: each strategy's `python -m compare` report, in
  the registry's order, rendered by compare's own report functions
  (`compare._src.prove.report`, and the strategy's own `report_lines`), plus the
  throughput sentence from its windows. `<!-- table: measured NAME -->`:
  strategy NAME's alone.
- `<!-- table: tolerances -->`: each strategy's tolerances and reasons.
- `<!-- table: errors -->`: the index of error messages.
- `<!-- table: dispatch -->`: time per call of a small step.
"""

import html
import json

from compare._src.prove import judging
from compare._src.prove import report as compare_report
from compare._src.prove import verdicts
from docs.guide import MEASURED
from docs.guide import GuideError
from docs.guide.figures import DispatchSource

# Reports whose final loss is the classic one: summed over each device's
# examples, averaged over devices (shardport.workloads.registry.Workload.loss), unless
# the report states its own `loss_convention`. The ensemble's members each
# report the mean over the whole batch.
SUMMED_LOSS = {"workloads": ("cnn", "linear512"),
               "strategies": ("data_parallel", "accumulation")}


def strategies():
  """The registry, in the guide's order."""
  from shardport.strategies import STRATEGIES  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  return STRATEGIES


def _cell(text):
  return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(head, rows, align=None):
  """A markdown table; `align` per column: 'l' or 'r' (default: first l)."""
  align = align or ["l"] + ["r"] * (len(head) - 1)
  marks = ["---:" if a == "r" else "---" for a in align]
  return "\n".join("| " + " | ".join(_cell(c) for c in row) + " |"
                   for row in [head, marks, *rows])


def tolerance_table(registry=None):
  """Each strategy's tolerances, then the engine's judging of every program
  (`compare._src.prove.judging`), with the reasons."""
  registry = strategies() if registry is None else registry
  rows = []
  for name, strategy in registry.items():
    for at, tol in getattr(strategy, "tolerances", {}).items():
      rows.append([name, at.replace("_", " "), f"{tol.rtol:g}",
                   f"{tol.atol:g}", getattr(tol, "reason", "")])
  every = "every program"
  rows += [
      [every, "lockstep, every step", "-", f"{judging.LOCKSTEP_MULTIPLE:g}× "
       "the one-step band (of the update)", judging.LOCKSTEP_REASON],
      [every, "end: one state evaluated by each run",
       f"{verdicts.SHARED_EVAL_RTOL:g}", "- (accuracy: one test example)",
       judging.SHARED_EVAL_REASON],
      [every, "free-running test metrics (shown)", "-",
       f"{judging.CALIBRATION_MULTIPLE:g}× the calibration runs' spread",
       judging.CALIBRATION_REASON]]
  return markdown_table(["strategy", "check", "rtol", "atol (× max|leaf|)",
                         "why"], rows, ["l", "l", "r", "r", "l"])


def throughput_sentence(report):
  """'no measurable difference' or 'X is faster by N%', from the windows.

  The windows time every run back to back, so each window's ratio cancels
  the machine's drift; a difference counts when the interquartile range of
  those ratios excludes 1.
  """
  ratio = compare_report.throughput_ratio(report)
  if ratio is None:
    return None
  lo, hi = ratio["quartiles"]
  how = (f"shard_map/pmap examples/s window by window: median "
         f"{ratio['median']:.3f}, quartiles {lo:.3f}–{hi:.3f}, over "
         f"{len(report['runs']['pmap']['window_examples_per_s'])} windows")
  if lo <= 1 <= hi:
    return f"shard_map against pmap: **no measurable difference** ({how})."
  faster, by = (("shard_map", ratio["median"] - 1) if lo > 1
                else ("pmap", 1 / ratio["median"] - 1))
  return f"**{faster} is faster by {by:.0%}** ({how})."


def _loss_note(report):
  if report.get("loss_convention"):
    return f" Final loss: {report['loss_convention']}."
  if (report.get("workload") not in SUMMED_LOSS["workloads"] or
      report.get("strategy") not in SUMMED_LOSS["strategies"]):
    return ""
  runs = [r for r in report["runs"].values()
          if isinstance(r.get("final_loss"), (int, float))]
  if not runs:
    return ""
  per = report["devices"] / report["global_batch"]
  return (f" Final loss is the classic program's: summed over each "
          f"device's {report['global_batch'] // report['devices']} examples, "
          f"averaged over devices; per example it is final loss × "
          f"{report['devices']}/{report['global_batch']} (e.g. "
          f"{runs[0]['final_loss'] * per:.4f}).")


def _load(report):
  load = report.get("load_average")
  if not load:
    return ""
  if len(load) == 3:
    return f", load average {load[0]}/{load[1]}/{load[2]} (1/5/15 min)"
  return f", 1-min load average {load[0]} before and {load[-1]} after"


def report_block(name, report):
  """One strategy's measured report, rendered by compare._src.prove.report."""
  try:
    rows = compare_report.run_rows(report)
    verdicts = compare_report.verdict_lines(report)
    head = compare_report.header(report)
  except (KeyError, TypeError, ValueError) as err:
    return (f"**{name}**: [`{MEASURED}/{name}.json`](measured/{name}.json) is "
            f"in a format this compare does not render ({type(err).__name__}"
            f": {err}): re-measure with `python -m docs.build_guide "
            f"--measure {name}`.")
  out = [f"<a id=\"measured-{name}\"></a>**{name}**: {head}; measured "
         f"{str(report.get('date', 'date not recorded'))[:10]}"
         + (f" on commit {report['commit']}" if report.get("commit") else "")
         + f"{_load(report)} ([`{MEASURED}/{name}.json`](measured/{name}.json))."
         + _loss_note(report), "",
         markdown_table(list(compare_report.COLUMNS), rows)]
  sentence = throughput_sentence(report)
  if sentence:
    out += ["", sentence]
  out += ["", "```text", *_strategy_lines(name, report), *verdicts,
          f"verdict: {report.get('verdict', '?')}", "```"]
  return "\n".join(out)


def _strategy_lines(name, report):
  """What only this strategy prints (fsdp's memory and collective bytes)."""
  try:
    return strategies()[name].report_lines(report)
  except (KeyError, TypeError, ValueError):
    return []


def measured_one(root, name):
  """One strategy's measured report (`<!-- table: measured NAME -->`)."""
  if name not in strategies():
    raise GuideError(f"table: measured {name}: no such strategy (choose "
                     f"from {', '.join(strategies())})")
  if not (root / MEASURED / f"{name}.json").is_file():
    raise GuideError(f"table: measured {name}: no {MEASURED}/{name}.json: "
                     f"run `python -m docs.build_guide --measure {name}`")
  return measured_table(root, {name: None})


def measured_table(root, registry=None):
  """Every strategy's measured report, in the registry's order."""
  registry = strategies() if registry is None else registry
  blocks = []
  for name in registry:
    file = root / MEASURED / f"{name}.json"
    if file.is_file():
      blocks.append(report_block(name, json.loads(file.read_text())))
  if not blocks:
    return ("*No measurements yet.* Generate them with `python "
            "-m docs.build_guide " + " ".join(f"--measure {n}" for n in
                                              registry) +
            "`, which runs `python -m compare --strategy STRATEGY --devices 8 "
            f"--json {MEASURED}/STRATEGY.json` for each and rebuilds this "
            "guide.")
  return "\n\n".join(blocks)


def errors_table(root):
  """The index of error messages: what you wrote, what JAX prints, the fix."""
  from docs import errors  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  file = root / MEASURED / "errors.json"
  if not file.is_file():
    raise GuideError(f"no {MEASURED}/errors.json: run `python "
                     "-m docs.build_guide --measure errors`")
  record = json.loads(file.read_text())
  rows = []
  for case in errors.CASES:
    if case.id not in record["messages"]:
      raise GuideError(f"{MEASURED}/errors.json has no message for "
                       f"{case.id}: run `python -m docs.build_guide --measure "
                       "errors`")
    message = quoted(record["messages"][case.id])
    if case.id == "optax-027" and not record.get("optax_027_real_import"):
      # Recorded without optax 0.2.7 installed: the call its import makes.
      message += (" (recorded through the call its import makes, "
                  "`jax.config.update(\"jax_pmap_shmap_merge\", False)`; "
                  "CI imports the real optax 0.2.7 and checks the message)")
    rows.append([f"<a id=\"err-{case.id}\"></a>{case.idiom}", message,
                 f"[fix]({case.fix})"])
  for entry in errors.RECORDED:  # quoted from the repository's notes
    rows.append([f"<a id=\"err-{entry.id}\"></a>{entry.idiom}",
                 f"{quoted(entry.message)} (as [`{entry.source}`]"
                 f"({_from_docs(entry.source)}) records it; not rerun: "
                 f"{entry.why})", f"[fix]({entry.fix})"])
  return (f"What jax {record['jax_version']} prints, first line "
          f"([`{MEASURED}/errors.json`](measured/errors.json)), except where "
          "a row says otherwise:\n\n"
          + markdown_table(["what you wrote", "what JAX prints", "fix"],
                           rows, ["l", "l", "l"]))


def _from_docs(path):
  """A link from docs/MIGRATION.md to `path` (from the repository root)."""
  return path[len("docs/"):] if path.startswith("docs/") else f"../{path}"


def quoted(message):
  """A message as the index shows it: literal, in a table cell."""
  return f"<code>{html.escape(message, quote=False)}</code>"


def dispatch_table(root):
  """Microseconds per call of a small step: pmap, jit(shard_map), jit."""
  file = root / MEASURED / "dispatch.json"
  if not file.is_file():
    raise GuideError(f"no {MEASURED}/dispatch.json: run `python "
                     "-m docs.build_guide --measure dispatch`")
  source = DispatchSource("dispatch", json.loads(file.read_text()))
  values, rows = source.values(), []
  for size, entry in source.data["sizes"].items():
    runs = entry["runs"]
    rows.append([f"{size}: {entry['features']} features, "
                 f"{entry['examples_per_device']} examples/device",
                 *(f"{runs[r]['us_per_call']:.0f} ({runs[r]['us_per_call_spread'][0]:.0f}–"
                   f"{runs[r]['us_per_call_spread'][1]:.0f})" for r in runs),
                 f"{values[size]['pmap_over_shard_map']:.2f}"])
  head = ["step", *(f"{r} µs/call (spread)" for r in runs),
          "pmap / shard_map (median of window ratios)"]
  return markdown_table(head, rows)
