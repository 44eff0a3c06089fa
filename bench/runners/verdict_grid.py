"""The verdict's two sides, measured: no false failures, and detection kept.

    python -m bench.runners.verdict_grid --json docs/measured/verdict_grid.json
    python -m bench.runners.verdict_grid --json ... --only correct --strategies fsdp

Run it in each environment (jax 0.10.2; jax 0.9.2 with
`JAX_PMAP_SHMAP_MERGE=0`, the original pmap runtime): the file records which.

- correct: every strategy, correct, at 10, 50 and 200 steps on digits and on
  random images and labels (`synthetic:28x28`), then data_parallel and
  accumulation over 1000 steps on each, then every strategy on 1, 2 and 8
  devices at 100 and 200 steps (8 devices at 200 steps is the digits run): none may fail. Each entry records the
  largest lockstep ratio, the steps excused as a rounding flip between two
  programs, and the end-of-run check of one shared state.
- detection: the late controls (`update-1pct-from:N`, `update-1pct-at:N`)
  at N = 1, 20, 100 and each strategy's last default step (those inside its
  default steps), and `grad-0.2pct-from:120` of data_parallel: the step
  each fails at. Each runs to step N + 1 (or the last) and checks every
  10th step (`--check-every 10`, which holds every N), to keep the grid
  within a session: no step after N can move the verdict at N.

Every entry is one `python -m compare` run with one timing window, written
as soon as it ends.
"""

import argparse
import json
import pathlib
import sys
import tempfile

from bench.runners import lockstep_runs
from bench import measure
from bench.runners import run_record

STRATEGIES = ("data_parallel", "accumulation", "fsdp", "ensemble",
              "ensemble_data")
DATASETS = {"digits": "digits", "synthetic": "synthetic:28x28"}
DEFAULT_STEPS = {"data_parallel": 200, "accumulation": 200, "fsdp": 200,
                 "ensemble": 77, "ensemble_data": 77}
LATE_STEPS = (1, 20, 100)


def correct_runs(strategies) -> dict:
  """`name -> flags` of the correct runs, quickest first."""
  # Step 10 of accumulation is where the original runtime's ReLU flip sits
  # (docs/jax-facts.md): 12 steps check past it.
  runs = {"accumulation_digits_12": ["--strategy", "accumulation",
                                     "--steps", "12"]}
  for steps in (10, 50, 200):
    for s in strategies:
      for key, dataset in DATASETS.items():
        runs[f"{s}_{key}_{steps}"] = ["--strategy", s, "--steps", str(steps),
                                      "--dataset", dataset]
  for s in ("data_parallel", "accumulation"):
    if s in strategies:
      for key, dataset in DATASETS.items():
        runs[f"{s}_{key}_1000"] = ["--strategy", s, "--steps", "1000",
                                   "--dataset", dataset]
  for devices in (1, 2, 8):
    for steps in (100, 200):
      if devices == 8 and steps == 200:
        continue  # `{s}_digits_200` above is this run.
      for s in strategies:
        # ensemble_data's default 2 members need 2 devices (a mesh row each).
        members = (["--members", "1"] if s == "ensemble_data" and devices == 1
                   else [])
        runs[f"{s}_{devices}dev_{steps}"] = [
            "--strategy", s, "--devices", str(devices), "--steps",
            str(steps), *members]
  return runs


def detection_runs(strategies) -> dict:
  """`name -> flags` of the planted late mistakes, N inside the defaults."""
  runs = {}
  for s in strategies:
    last = DEFAULT_STEPS[s]
    for n in sorted({*[n for n in LATE_STEPS if n <= last], last}):
      for kind in ("from", "at"):
        # The steps after N cannot move the verdict at N (each check steps
        # from the shared state): one more step past N, or the last.
        runs[f"{s}_{kind}_{n}"] = [
            "--strategy", s, "--steps", str(min(n + 1, last)),
            "--check-every", "10",
            "--negative-control", f"update-1pct-{kind}:{n}"]
  if "data_parallel" in strategies:
    runs["data_parallel_grad_0.2pct_from_120"] = [
        "--strategy", "data_parallel", "--steps", "121", "--check-every",
        "10", "--negative-control", "grad-0.2pct-from:120"]
  return runs


def summarise(report: dict) -> dict:
  """What the guide quotes beyond `lockstep_runs.summarise`: the excused
  flips and the largest gap of the shared-state evaluation."""
  flips = {f"{v['a']}~{v['b']}": v["flip_steps"]
           for v in report["equivalence"]
           if v["at"] == "lockstep" and v.get("flip_steps")}
  gaps = [m["gap"] / m["allowed"] if m["allowed"] else 0.0
          for v in report["equivalence"] if v.get("shared_eval")
          for m in v["shared_eval"]["metrics"].values()]
  return {"flip_steps": flips, "runtime": report.get("pmap_runtime"),
          "shared_eval_max_share": max(gaps, default=None)}


def _measure(name, flags, folder):
  commit = measure.commit_of(pathlib.Path.cwd())
  entry = {"commit": commit,
           **lockstep_runs._compare(name, flags, folder)}  # pylint: disable=protected-access
  path = pathlib.Path(folder) / f"{name}.json"
  if path.exists():
    entry.update(summarise(json.loads(path.read_text())))
  return entry


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  parser.add_argument("--only", nargs="+", default=("correct", "detection"),
                      choices=("correct", "detection"))
  parser.add_argument("--strategies", nargs="+", default=STRATEGIES,
                      choices=STRATEGIES)
  parser.add_argument("--names", nargs="+", default=None,
                      help="measure only the entries with these names")
  args = parser.parse_args(argv)
  path = pathlib.Path(args.json)
  old = json.loads(path.read_text()) if path.exists() else {}
  groups = {key: old.get(key, {}) for key in ("correct", "detection")}
  folder = tempfile.mkdtemp(prefix="shardport-grid-")
  plan = {"correct": correct_runs(args.strategies),
          "detection": detection_runs(args.strategies)}
  for group in args.only:
    for name, flags in plan[group].items():
      if args.names and name not in args.names:
        continue
      groups[group][name] = _measure(name, flags, folder)
      run_record.write(
          args.json, "verdict_grid",
          "the CNN, 8 emulated CPU devices unless said, one timing window; "
          "detection checks every 10th step",
          commit=measure.commit_of(pathlib.Path.cwd()), **groups)
  return 0


if __name__ == "__main__":
  sys.exit(main())
