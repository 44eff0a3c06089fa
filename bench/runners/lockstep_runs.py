"""Runs that pin the lockstep verdict: late mistakes caught, correct ports not.

    python -m bench.runners.lockstep_runs --json docs/measured/lockstep.json
    python -m bench.runners.lockstep_runs --json ... --only detection correct cost

Three groups, each a set of `python -m compare` runs (one timing window):

- detection: the late negative controls (`update-1pct-from:N`,
  `update-1pct-at:N`) of every strategy for N in 1, 20, 100, 199 of 200
  steps, and data_parallel's at 1000 of 1000: the step each is caught at;
- correct: correct ports over 1000 steps on digits, on random labels, on
  1, 2 and 8 devices, and the 16-member ensemble: none may fail;
- cost: every strategy's default run (ten timing windows) with the checks
  and without them (`outcome.compare(check_every=None)`), twice each,
  interleaved, in this process, after one warm-up run that is not timed.

Every entry records its command, exit code, verdict, first failing step,
the largest lockstep ratio per pair and the checks' wall time.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from bench.runners import run_record

N_OF_200 = (1, 20, 100, 199)
# The default run's timing windows (`python -m compare --windows`): the cost
# group times the default runs as users run them.
DEFAULT_WINDOWS = 10
STRATEGIES = ("data_parallel", "ensemble", "accumulation")
DETECTION = {
    **{f"{s}_{c}_{n}": ["--strategy", s, "--steps", "200",
                        "--negative-control", f"update-1pct-{c}:{n}"]
       for s in STRATEGIES for c in ("from", "at") for n in N_OF_200},
    **{f"data_parallel_{c}_1000": ["--strategy", "data_parallel", "--steps",
                                   "1000", "--negative-control",
                                   f"update-1pct-{c}:1000"]
       for c in ("from", "at")},
}
CORRECT = {
    **{f"{s}_1000": ["--strategy", s, "--steps", "1000"] for s in STRATEGIES},
    "data_parallel_random_labels": ["--strategy", "data_parallel",
                                    "--dataset", "synthetic:28x28",
                                    "--steps", "100"],
    **{f"data_parallel_{d}dev": ["--strategy", "data_parallel", "--devices",
                                 str(d)] for d in (1, 2, 8)},
    "accumulation_1dev": ["--strategy", "accumulation", "--devices", "1"],
    "ensemble_16_members": ["--strategy", "ensemble", "--members", "16"],
    "ensemble_16_vmap": ["--strategy", "ensemble", "--members", "16",
                         "--member-loop", "vmap"],
}


def summarise(report: dict, code: int, seconds: float) -> dict:
  """What the guide quotes from one report."""
  checks = report.get("lockstep", {})
  pairs = {f"{v['a']}~{v['b']}": {"verdict": v["verdict"],
                                  "max_ratio": v["max_ratio"],
                                  "first_fail_step": v["first_fail_step"]}
           for v in report["equivalence"] if v["at"] == "lockstep"}
  return {"exit": code, "verdict": report["verdict"],
          "first_failure": report.get("first_failure"),
          "first_fail_step": min((p["first_fail_step"] for p in pairs.values()
                                  if p["first_fail_step"]), default=None),
          "steps": report["steps"], "devices": report["devices"],
          "band": checks.get("band"), "multiple": checks.get("multiple"),
          "max_ratio": max((p["max_ratio"] for p in pairs.values()),
                           default=None),
          "checks_s": checks.get("seconds"), "wall_s": seconds,
          "pairs": pairs}


def _compare(name, argv, folder):
  path = pathlib.Path(folder) / f"{name}.json"
  command = ["-m", "compare", "--windows", "1", "--json", str(path), *argv]
  start = time.perf_counter()
  code = subprocess.run([sys.executable, *command], capture_output=True,
                        check=False).returncode
  seconds = time.perf_counter() - start
  entry = {"command": run_record.command_line(command[:4] + command[6:])}
  if path.exists():
    entry.update(summarise(json.loads(path.read_text()), code, seconds))
  else:
    entry.update({"exit": code, "wall_s": seconds})
  return entry


def _cost() -> dict:
  """Default runs with and without the checks, interleaved, in-process."""
  from shardport.launch import emulation  # pylint: disable=g-import-not-at-top
  emulation.set_cpu_device_count(8)
  import jax  # pylint: disable=g-import-not-at-top
  if jax.device_count() < 8:  # jax was imported before the count was set
    raise RuntimeError(f"the cost group needs 8 devices, jax has "
                       f"{jax.device_count()}: run it with --only cost")
  from compare._src.prove import outcome  # pylint: disable=g-import-not-at-top
  from compare._src import ports  # pylint: disable=g-import-not-at-top
  from shardport import strategies  # pylint: disable=g-import-not-at-top
  from shardport.workloads import datasets  # pylint: disable=g-import-not-at-top
  data = datasets.load("digits")
  out = {}
  for name in STRATEGIES:
    strategy = strategies.get(name)
    config = strategy.make_config({}, data)
    plan = ports.planned(strategy, config, data, 8)
    walls = {"with_checks_s": [], "without_checks_s": []}
    # Warm-up, not timed: the process's first compiles of this strategy.
    outcome.compare(plan, config, 8, windows=DEFAULT_WINDOWS,
                    check_every=None)
    for _ in range(2):
      for key, every in (("with_checks_s", 1), ("without_checks_s", None)):
        start = time.perf_counter()
        report = outcome.compare(plan, config, 8, windows=DEFAULT_WINDOWS,
                                 check_every=every)
        walls[key].append(time.perf_counter() - start)
        if every:
          walls.setdefault("checks_s", []).append(
              report["lockstep"]["seconds"])
    out[name] = {**walls, "steps": config.steps,
                 "added": (sum(walls["with_checks_s"])
                           / sum(walls["without_checks_s"]) - 1)}
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  parser.add_argument("--only", nargs="+", default=None,
                      choices=("detection", "correct", "cost"),
                      help="measure these groups only; keep the others "
                           "from the existing --json file")
  args = parser.parse_args(argv)
  path = pathlib.Path(args.json)
  old = json.loads(path.read_text()) if args.only and path.exists() else {}
  groups = {key: old.get(key, {}) for key in ("detection", "correct",
                                                "cost")}
  wanted = args.only or list(groups)
  folder = tempfile.mkdtemp(prefix="shardport-lockstep-")

  def save():  # after every run: a long measurement keeps what it has
    run_record.write(
        args.json, "lockstep",
        "the CNN (digits unless said), 8 emulated CPU devices unless said, "
        "one timing window", **groups)

  for group, runs in (("correct", CORRECT), ("detection", DETECTION)):
    if group in wanted:
      groups[group] = {}
      for name, flags in runs.items():
        groups[group][name] = _compare(name, flags, folder)
        save()
  if "cost" in wanted:
    groups["cost"] = _cost()
    save()
  return 0


if __name__ == "__main__":
  sys.exit(main())
