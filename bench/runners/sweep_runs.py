"""Each strategy's device sweep, with its curves, for the guide.

    python -m bench.runners.sweep_runs --json docs/measured/sweep.json

Runs `python -m compare --strategy S --sweep-devices 1,2,4,8 --plot
docs/measured/sweep_S.png` for every strategy, at short lengths (the sweep
is about throughput, compile time and collective bytes; the verdict at each
count is kept too). About 10 minutes on 2 cores.
"""

import argparse
import json
import pathlib
import sys
import tempfile

from bench.runners import run_record

COUNTS = "1,2,4,8"
# Its members x data mesh needs a row per member (2 by default).
COUNTS_FOR = {"ensemble_data": "2,4,8"}
LENGTH = {"data_parallel": ["--steps", "20"], "ensemble": ["--epochs", "1"],
          "accumulation": ["--steps", "20"], "ensemble_data": ["--steps", "20"],
          "fsdp": ["--steps", "20"]}


def argv_for(strategy, json_path, plot_path):
  return ["-m", "compare", "--strategy", strategy, *LENGTH[strategy],
          "--windows", "5", "--sweep-devices",
          COUNTS_FOR.get(strategy, COUNTS), "--json",
          str(json_path), "--plot", str(plot_path)]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  args = parser.parse_args(argv)
  folder = pathlib.Path(tempfile.mkdtemp(prefix="shardport-sweep-"))
  measured = pathlib.Path(args.json).parent
  strategies, failed = {}, []
  for strategy in LENGTH:
    path, plot = folder / f"{strategy}.json", measured / f"sweep_{strategy}.png"
    code, seconds = run_record.run(argv_for(strategy, path, plot),
                                   log=path.with_suffix(".log"))
    entry = {"command": run_record.command_line(argv_for(
        strategy, "R.json", f"docs/measured/sweep_{strategy}.png")),
             "exit": code, "seconds": seconds, "plot": plot.name}
    if code == 0:
      entry.update(json.loads(path.read_text()))
    else:
      failed.append(strategy)
    strategies[strategy] = entry
  run_record.write(
      args.json, "sweep", "each strategy's default workload (the CNN on "
      "digits) on the first 1, 2, 4 and 8 of 8 emulated CPU devices "
      "(ensemble_data: 2, 4 and 8, a row per member), short runs",
      strategies=strategies, failed=failed,
      logs=str(folder) if failed else None)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
