"""Programs that queue steps unread, run again and again on emulated CPU
devices: how many runs end, with XLA's CPU client as it starts and with
`compare.testing.emulated_cpu_environment` (the pytest plugin's settings).

    python -m bench.probes.emulated_cpu_runs [--runs 20] [--devices 8]

The programs, unchanged: the JAX pmap tutorial as it is written
(bench/real_programs/pmap_tutorial.py, 1000 steps, a loss read every 100th),
what `python -m compare.rewrite --global` writes of it, and the `--global`
rewrite of the seeded tutorial (tests/rewrite_inputs, no wait of ours in
it). Prints the markdown table docs/REWRITE.md shows (runs ended with exit
0 of all runs, and the slowest run's seconds).
"""

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from compare import testing
from shardport.launch import emulation

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = (
    ("the pmap tutorial as written", "bench/real_programs/pmap_tutorial.py",
     False),
    ("its `--global` rewrite", "bench/real_programs/pmap_tutorial.py", True),
    ("the seeded tutorial's `--global` rewrite (no wait)",
     "tests/rewrite_inputs/tutorial_linear_regression.py", True),
)


def written(source: pathlib.Path, workdir: pathlib.Path, global_step: bool):
  """`source`, or what `compare.rewrite --global` writes of it."""
  if not global_step:
    return source
  target = workdir / f"{source.stem}_global.py"
  # Exit 1 where some places need a person: the file is written all the same.
  subprocess.run([sys.executable, "-m", "compare.rewrite", str(source), "-o",
                  str(target), "--global"], cwd=ROOT, capture_output=True,
                 check=False)
  if not target.exists():
    raise RuntimeError(f"compare.rewrite --global wrote nothing for {source}")
  return target


def runs(script: pathlib.Path, env: dict, count: int, timeout: float):
  """`count` runs of `python SCRIPT`: (exit codes, slowest seconds)."""
  codes, slowest = [], 0.0
  for _ in range(count):
    start = time.perf_counter()
    try:
      codes.append(subprocess.run([sys.executable, str(script)], env=env,
                                  cwd=script.parent, capture_output=True,
                                  timeout=timeout, check=False).returncode)
    except subprocess.TimeoutExpired:
      codes.append("timeout")
    slowest = max(slowest, time.perf_counter() - start)
  return codes, slowest


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--runs", type=int, default=20)
  parser.add_argument("--devices", type=int, default=8)
  parser.add_argument("--timeout", type=float, default=300)
  parser.add_argument("--settings", default="plain,helper",
                      help="plain (XLA's own thread pool), helper, or both")
  args = parser.parse_args(argv)
  helper = testing.emulated_cpu_environment(args.devices)
  plain = {**helper}
  plain.pop(emulation.THREADS_ENV, None)
  if emulation.THREADS_ENV in os.environ:
    print(f"note: {emulation.THREADS_ENV} is set here; the plain runs drop it")
  settings = {"plain": plain, "helper": helper}
  print("| program | setting | runs ended (exit 0) | slowest run |")
  print("|---|---|---|---|")
  failed = 0
  with tempfile.TemporaryDirectory() as workdir:
    for name, source, global_step in PROGRAMS:
      script = written(ROOT / source, pathlib.Path(workdir), global_step)
      for setting in args.settings.split(","):
        codes, slowest = runs(script, settings[setting], args.runs,
                              args.timeout)
        ok = codes.count(0)
        others = sorted({str(c) for c in codes if c != 0})
        if setting == "helper":
          failed += len(codes) - ok
        print(f"| {name} | {setting} | {ok} of {len(codes)}"
              f"{' (others: exit ' + ', '.join(others) + ')' if others else ''}"
              f" | {slowest:.0f} s |", flush=True)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
