"""Tables of how the backends perform: device sweeps and repeated runs.

- `<!-- table: sweep -->`: every strategy's `--sweep-devices 1,2,4,8`, with
  its curves (docs/measured/sweep.json and sweep_STRATEGY.png,
  `bench/runners/sweep_runs.py`).
- `<!-- table: ensemble-runs -->`: the ensemble's shard_map/pmap ratio over
  repeated default runs (docs/measured/ensemble_runs.json,
  `bench/runners/ensemble_runs.py`).
"""

from compare._src.prove import sweep
from docs.guide.jobs import load
from docs.guide.jobs import measured_note
from docs.guide.tables import markdown_table


def _sweep_rows(entry):
  rows = []
  for point in entry["sweep"]:
    for name, run in point["runs"].items():
      rate, (lo, hi) = run["examples_per_s"], run["examples_per_s_spread"]
      rows.append([str(point["devices"]), name, f"{rate:.0f}",
                   f"{lo:.0f}–{hi:.0f}", f"{run['compile_s']:.2f}",
                   f"{(run.get('all_reduce_bytes') or 0) / 1024:.1f}",
                   f"{sweep.other_collective_bytes(run) / 1024:.1f}",
                   point["verdict"]])
  return rows


def sweep_table(root):
  """Each strategy's sweep: a table and its curves."""
  record = load(root, "sweep")
  blocks = [f"{record['workload']} ({measured_note(record, 'sweep')}):"]
  for strategy, entry in record["strategies"].items():
    if entry["exit"] != 0:
      blocks.append(f"**{strategy}**: the sweep failed (exit "
                    f"{entry['exit']}).")
      continue
    table = markdown_table(
        ["devices", "run", "examples/s", "spread", "compile s",
         "all-reduced KiB per step", "other collectives' KiB per step",
         "verdict"], _sweep_rows(entry))
    blocks.append(f"**{strategy}** (`{entry['command']}`):\n\n{table}\n\n"
                  f"![{strategy}: examples/s and collective bytes against "
                  f"the device count](measured/{entry['plot']})")
  return "\n\n".join(blocks)


def ensemble_runs_table(root):
  """The ensemble's shard_map/pmap ratio, run by run, and their median."""
  record = load(root, "ensemble_runs")
  rows = []
  for i, run in enumerate(record["runs"], 1):
    if run["exit"] != 0:
      rows.append([str(i), f"exit {run['exit']}", "-", "-", "-", "-"])
      continue
    lo, hi = run["ratio"]["quartiles"]
    rows.append([str(i), f"{run['ratio']['median']:.3f}",
                 f"{lo:.3f}–{hi:.3f}",
                 f"{run['examples_per_s']['pmap']:.0f}",
                 f"{run['examples_per_s']['shard_map']:.0f}",
                 ", ".join(run["pmap_shard_map"]) + f"; {run['verdict']}"])
  table = markdown_table(
      ["run", "shard_map/pmap (median of windows)", "quartiles",
       "pmap examples/s", "shard_map examples/s",
       "pmap~shard_map verdicts; overall"], rows)
  return (f"`{record['command_line']}`, {len(record['runs'])} times "
          f"({measured_note(record, 'ensemble_runs')}):\n\n{table}\n\n"
          f"Median over the runs: **{record['median_of_medians']:.3f}**.")
