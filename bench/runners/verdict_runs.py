"""Long runs that pin the calibrated verdict: correct ports and known mistakes.

    python -m bench.runners.verdict_runs --json docs/measured/verdicts.json
    python -m bench.runners.verdict_runs --from DIR --json ...   # summarise DIR/*.json
    python -m bench.runners.verdict_runs --json ... --only NAME  # re-measure one entry

Runs `python -m compare` for data_parallel and accumulation at 20, 300 and
1000 steps, and each negative control at 20 and 300 steps; the ensemble at
20 epochs with and without its controls, and with 16 vmapped members; and
data_parallel on random-label 28x28 inputs at 30 and 100 steps and on 2
devices at 20 steps. It takes
about an hour on 2 cores. Every entry records the command, its exit
code, the verdict, each final pair's largest drift over the calibration
band, and the test accuracies, so the guide's figures are drawn from here.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

RUNS = {
    **{f"{s}_{steps}": ["--strategy", s, "--steps", str(steps)]
       for s in ("data_parallel", "accumulation") for steps in (20, 300, 1000)},
    **{f"{s}_{steps}_{c}": ["--strategy", s, "--steps", str(steps),
                            "--negative-control", c]
       for s in ("data_parallel", "accumulation") for steps in (20, 300)
       for c in ("gradient-trap", "lr-1pct", "no-pmean")},
    "ensemble_20ep": ["--strategy", "ensemble", "--epochs", "20"],
    **{f"ensemble_20ep_{c}": ["--strategy", "ensemble", "--epochs", "20",
                              "--negative-control", c]
       for c in ("members-mixed", "lr-1pct")},
    "ensemble_vmap16": ["--strategy", "ensemble", "--members", "16",
                        "--member-loop", "vmap"],
    # A model that only fits noise (random labels): ReLU flips make the drift
    # jump at random steps, the case that needs several calibration runs.
    **{f"data_parallel_synthetic28_{steps}": [
        "--strategy", "data_parallel", "--dataset", "synthetic:28x28",
        "--steps", str(steps)] for steps in (30, 100)},
    # 2 devices: the classic summed loss makes the step 4x larger than on 8,
    # and training runs at the edge of stability (flips).
    "data_parallel_2dev_20": ["--strategy", "data_parallel", "--devices", "2",
                              "--steps", "20"],
}


def summarise(report: dict) -> dict:
  """What the guide quotes from one report."""
  pairs = {}
  for v in report["equivalence"]:
    entry = pairs.setdefault(f"{v['a']}~{v['b']}", {})
    entry[f"{v['at']}_verdict"] = v["verdict"]
    if v["at"] == "lockstep":  # steps from one state: ratios to the band
      entry["lockstep_max_ratio"] = v["max_ratio"]
      entry["lockstep_first_fail_step"] = v["first_fail_step"]
    elif "max_abs" in v:  # a handover's entry (`switch`) has none
      entry[f"{v['at']}_max_abs"] = v["max_abs"]
    if v.get("calibration"):
      entry["max_ratio"] = v["calibration"]["max_ratio"]
      entry["worst_step"] = v["calibration"]["worst_step"]
      entry["flip_step"] = v["calibration"].get("flip_step")
      entry["max_ratio_after_flip"] = v["calibration"].get(
          "max_ratio_after_flip")
  curve = report["calibration"]["drift_per_step"]
  return {"verdict": report["verdict"], "steps": report["steps"],
          "negative_control": report.get("negative_control"),
          "calibration_final": curve[-1] if curve else None,
          "calibration_runs": {
              name: sample["drift_per_step"][-1] for name, sample in
              report["calibration"].get("samples", {}).items()},
          "calibration_multiple": next(
              (v["calibration"]["multiple"] for v in report["equivalence"]
               if v.get("calibration")), None),
          "test_accuracy": {n: r.get("test_accuracy")
                            for n, r in report["runs"].items()},
          "pairs": pairs}


def run_one(name, argv, folder):
  path = pathlib.Path(folder) / f"{name}.json"
  command = [sys.executable, "-m", "compare", "--windows", "1", "--json",
             str(path), *argv]
  start = time.perf_counter()
  code = subprocess.run(command, capture_output=True, check=False).returncode
  return path, code, time.perf_counter() - start


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  parser.add_argument("--from", dest="source", default=None,
                      help="summarise existing reports NAME.json in this "
                           "folder (exit codes from its exits.txt)")
  parser.add_argument("--only", nargs="+", choices=list(RUNS), default=None,
                      help="run these entries only and replace them in the "
                           "existing --json file, keeping the others")
  args = parser.parse_args(argv)
  folder = args.source or tempfile.mkdtemp()
  exits = {}
  if args.source and os.path.exists(f"{folder}/exits.txt"):
    for line in open(f"{folder}/exits.txt", encoding="utf-8"):
      parts = line.split()
      if len(parts) == 3:
        exits[parts[0]] = int(parts[2])
  out = {}
  if args.only and os.path.exists(args.json):
    out = json.loads(pathlib.Path(args.json).read_text())["runs"]
  for name, flags in RUNS.items():
    if args.only and name not in args.only:
      continue
    path = pathlib.Path(folder) / f"{name}.json"
    if not args.source:
      path, exits[name], _ = run_one(name, flags, folder)
    if not path.exists():
      continue
    out[name] = {"command": "python -m compare --windows 1 " + " ".join(flags),
                 "exit": exits.get(name),
                 **summarise(json.loads(path.read_text()))}
  import datetime  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  meta = {"workload": "the default CNN runs on digits, 8 emulated CPU "
                      "devices, one timing window",
          "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
          "jax_version": jax.__version__,
          "command": "python -m docs.build_guide --measure verdicts"}
  pathlib.Path(args.json).write_text(
      json.dumps({**meta, "runs": out}, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
