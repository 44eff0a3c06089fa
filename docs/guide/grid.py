"""The verdict grid's tables, a cell for every run
`bench/runners/verdict_grid.py` plans.

- `<!-- table: verdict-grid -->`: the correct ports at 10, 50, 200 and 1000
  steps, on digits and random data, in both environments.
- `<!-- table: verdict-grid-devices -->`: the correct ports on 1, 2 and 8
  devices at 100 and 200 steps.
- `<!-- table: verdict-grid-detection -->`: the planted mistakes, the step
  each failed at and its ratio to the band.

Each reads docs/measured/verdict_grid.json (jax 0.10.2) and
verdict_grid_original.json (jax 0.9.2, the original pmap runtime); a run the
runner plans but no file holds shows as not measured, so the tables say what
is left as well as what passed.
"""

from bench.runners import verdict_grid
from docs.guide.jobs import load
from docs.guide.tables import markdown_table

FILES = ("verdict_grid", "verdict_grid_original")
_ENVIRONMENTS = {"verdict_grid": "0.10.2", "verdict_grid_original": "original"}
_NOT_MEASURED = "not measured"
_DEVICES = ((1, 100), (1, 200), (2, 100), (2, 200), (8, 100))


def _correct(entry):
  if entry is None:
    return _NOT_MEASURED
  flips = sorted({s for steps in (entry.get("flip_steps") or {}).values()
                  for s in steps})
  text = f"{entry['max_ratio']:.2f}, {entry['verdict']}"
  return text + (f"; a flip excused at step {', '.join(map(str, flips))}"
                 if flips else "")


def _detected(entry):
  if entry is None:
    return _NOT_MEASURED
  return f"{entry['first_fail_step']} ({entry['max_ratio']:.0f}x)"


def _cells(root, group, names, cell):
  """`cell` of each name in each file, file by file."""
  files = [load(root, name).get(group, {}) for name in FILES]
  return [cell(found.get(name)) if name is not None else "-"
          for found in files for name in names]


def _planned(group):
  plan = (verdict_grid.correct_runs if group == "correct"
          else verdict_grid.detection_runs)
  return plan(verdict_grid.STRATEGIES)


def correct_table(root):
  """Strategy and steps down; dataset and environment across."""
  planned = _planned("correct")
  rows = []
  for steps in (10, 12, 50, 200, 1000):
    for s in verdict_grid.STRATEGIES:
      names = [n if n in planned else None for n in
               (f"{s}_{key}_{steps}" for key in verdict_grid.DATASETS)]
      if any(names):
        rows.append([f"{s}, {steps} steps",
                     *_cells(root, "correct", names, _correct)])
  head = ["correct port", *(f"{data}, {_ENVIRONMENTS[f]}" for f in FILES
                            for data in verdict_grid.DATASETS)]
  return markdown_table(head, rows)


def devices_table(root):
  """Strategy down; devices and steps across, jax 0.10.2 only."""
  files = load(root, "verdict_grid").get("correct", {})
  rows = [[s, *(_correct(files.get(f"{s}_{d}dev_{n}")) for d, n in _DEVICES)]
          for s in verdict_grid.STRATEGIES]
  head = ["correct port, jax 0.10.2",
          *(f"{d} device{'s' * (d > 1)}, {n} steps" for d, n in _DEVICES)]
  return markdown_table(head, rows)


def detection_table(root):
  """Strategy and N down; the control and environment across."""
  planned = _planned("detection")
  rows, done = [], set()
  for name in planned:
    base = name.replace("_from_", "_@_").replace("_at_", "_@_")
    if base in done:
      continue
    done.add(base)
    pair = [base.replace("_@_", f"_{kind}_") for kind in ("from", "at")]
    pair = [n if n in planned else None for n in pair]
    label = (base.replace("_@_", ", N = ") if "_@_" in base
             else base.replace("_", " "))
    rows.append([label, *_cells(root, "detection", pair, _detected)])
  head = ["planted mistake", *(f"{kind}:N, {_ENVIRONMENTS[f]}" for f in FILES
                               for kind in ("from", "at"))]
  return markdown_table(head, rows)
