"""`--measure TARGET`: regenerate one file under docs/measured/.

    python -m bench.measure --list
    python -m bench.measure TARGET [TARGET ...]

`python -m docs.build_guide --measure TARGET` calls `measure`. Targets:
every strategy in the registry (`python -m compare --strategy S --devices 8
--json docs/measured/S.json`), `traps` (`python -m docs.traps`),
`dispatch` (`python -m bench.runners.dispatch`), `errors` (`python -m
docs.errors`), the long runs behind the verdict, the handover of a running
job, 2 processes against 1, the device sweeps and the repeated ensemble
runs (`python -m bench.runners.NAME_runs`), and `all`.
Every file gets the date (UTC) and the command that made it, so the guide
says when and how each figure was measured; the guide's figures name the
file they come from.
"""

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys

# Where the guide reads its figures from (`docs.guide.MEASURED`, which
# builds on this module: bench sits below docs).
MEASURED = "docs/measured"

# target -> the module (run from the repo root) that writes it, given
# `--json PATH`
SCRIPTS = {"traps": ["-m", "docs.traps"],
           "dispatch": ["-m", "bench.runners.dispatch"],
           "errors": ["-m", "docs.errors"],
           # About an hour on 2 cores: the long runs behind the verdict.
           "verdicts": ["-m", "bench.runners.verdict_runs"],
           # About an hour on 2 cores: late mistakes and correct ports.
           "lockstep": ["-m", "bench.runners.lockstep_runs"],
           # Hours on 2 cores: no false failures and detection, in the
           # environment it runs in (bench/runners/verdict_grid.py).
           "verdict_grid": ["-m", "bench.runners.verdict_grid"],
           "handover": ["-m", "bench.runners.handover_runs"],
           "many_hosts": ["-m", "bench.runners.many_hosts_runs"],
           "sweep": ["-m", "bench.runners.sweep_runs"],
           "ensemble_runs": ["-m", "bench.runners.ensemble_runs"],
           # The jit ports before and after their fixes (issue 32).
           "jit_ports": ["-m", "bench.runners.jit_ports"],
           # Team programs written elsewhere, their wrong ports and plants.
           "team_programs": ["-m", "docs.team_programs"],
           # python -m compare.rewrite on a flax-examples-style script.
           "rewrite": ["-m", "bench.runners.rewrite_runs"],
           # ... and on programs written elsewhere: needs tensorflow-cpu
           # and FLAX_CHECKOUT, a checkout of google/flax (about 30 min).
           "real_programs": ["-m", "bench.real_programs.run"],
           # ... to global arrays (`compare.rewrite --global`).
           "real_programs_global": ["-m", "bench.real_programs.run",
                                    "--global"],
           # A real tf.data pipeline batching per device, to global
           # arrays, in 1x8 and 2x4: needs tensorflow-cpu (issue 74).
           "rewrite_tfdata": ["-m", "bench.real_programs.tfdata_global"],
           # ... and our examples to global arrays, proved by their Ports.
           "rewrite_examples": ["-m", "bench.runners.rewrite_examples_runs"],
           # --global on every input it writes a step for (issue 58).
           "rewrite_global": ["-m", "bench.runners.rewrite_global_runs"],
           # The prover at real sizes, with and without a reference step
           # (about 20 min each on 2 cores).
           "prove_scale": ["-m", "bench.runners.prove_scale", "--sizes",
                           "0.5,2,4,8", "--transformer", "--census"],
           "prove_scale_reference": ["-m", "bench.runners.prove_scale",
                                     "--sizes", "0.5,2,4,8", "--reference",
                                     "--census"],
           # The issue 13 utilisation target's workload: 28x28 inputs.
           "utilisation": ["-m", "compare", "--strategy", "data_parallel",
                           "--dataset", "synthetic:28x28", "--steps", "30",
                           "--devices", "8"]}


def targets(registry):
  return (*registry, *SCRIPTS)


def command(target, out, devices=8):
  """The command that regenerates `target` into `out`."""
  if target in SCRIPTS:
    return [sys.executable, *SCRIPTS[target], "--json", str(out)]
  return [sys.executable, "-m", "compare", "--strategy", target,
          "--devices", str(devices), "--json", str(out)]


def commit_of(root):
  """HEAD's short hash, with `+changes` when the tree differs from it."""
  def git(*args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True,
                          text=True).stdout.strip()
  head = git("rev-parse", "--short", "HEAD") or "unknown"
  return head + ("+changes" if git("status", "--porcelain", "--",
                                   "*.py") else "")


def measure(target, root, devices=8):
  """Runs the measurement of `target` into docs/measured/, dated.

  The file is kept as written, plus a `date` (UTC) and the `command` when it
  has none, the commit measured (`+changes` when Python files differed from
  it), and the machine's load average, since other work on the machine
  skews throughput. Returns the command's exit code; the file is written
  whatever compare's verdict (the table shows it).
  """
  out = root / MEASURED / f"{target}.json"
  out.parent.mkdir(parents=True, exist_ok=True)
  load, commit = os.getloadavg()[0], commit_of(root)
  # `python -m` puts its working directory first on the path: run from
  # `root`, the modules are the checkout's own, not an installed copy.
  code = subprocess.call(command(target, out, devices), cwd=root)
  if out.is_file():
    record = json.loads(out.read_text())
    record.setdefault("date", datetime.datetime.now(
        datetime.timezone.utc).date().isoformat())
    record.setdefault("command", "python -m docs.build_guide --measure "
                                 f"{target}")
    record.setdefault("commit", commit)
    record.setdefault("load_average", [round(load, 2),
                                       round(os.getloadavg()[0], 2)])
    out.write_text(json.dumps(record, indent=1) + "\n")
  return code


def _registry():
  from shardport.strategies import STRATEGIES  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  return STRATEGIES


def main(argv=None) -> int:
  """`--list`: every target and the command that writes it; else runs each
  TARGET into docs/measured/ (as `python -m docs.build_guide --measure`,
  without rebuilding the guide)."""
  parser = argparse.ArgumentParser(prog="python -m bench.measure",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("targets", nargs="*", metavar="TARGET")
  parser.add_argument("--list", action="store_true",
                      help="name every target and its command")
  args = parser.parse_args(argv)
  known = targets(_registry())
  if args.list or not args.targets:
    for target in known:
      line = command(target, pathlib.Path(MEASURED) / f"{target}.json")
      print(f"{target}: python {' '.join(line[1:])}")
    return 0
  unknown = [t for t in args.targets if t not in known]
  if unknown:
    print(f"bench.measure: {unknown[0]} is no target (--list names them)",
          file=sys.stderr)
    return 2
  root = pathlib.Path(__file__).resolve().parents[1]
  return max(measure(t, root) for t in args.targets)


if __name__ == "__main__":
  sys.exit(main())
