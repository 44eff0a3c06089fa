"""The ensemble port against pmap over repeated default runs (issue 13).

    python -m bench.runners.ensemble_runs --json docs/measured/ensemble_runs.json

Runs `python -m compare --strategy ensemble` at its defaults RUNS times, one
after another, and records each run's shard_map/pmap examples/s ratio
(median and quartiles of the window-by-window ratios), its verdict and the
pmap~shard_map pair's verdicts, and the median over the runs. About 6
minutes on 2 cores.
"""

import argparse
import json
import pathlib
import statistics
import sys
import tempfile

from bench.runners import run_record

RUNS = 5


def one_run(index, folder):
  path = folder / f"run{index}.json"
  argv = ["-m", "compare", "--strategy", "ensemble", "--json", str(path)]
  code, seconds = run_record.run(argv, log=path.with_suffix(".log"))
  if code != 0:
    return {"exit": code, "seconds": seconds}
  report = json.loads(path.read_text())
  return {"exit": code, "seconds": seconds, "verdict": report["verdict"],
          "load_average": report["load_average"],
          "ratio": report["throughput_ratio_shard_map_vs_pmap"],
          "examples_per_s": {n: r["examples_per_s"]
                             for n, r in report["runs"].items()},
          "pmap_shard_map": [v["verdict"] for v in report["equivalence"]
                             if {v["a"], v["b"]} == {"pmap", "shard_map"}]}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  parser.add_argument("--runs", type=int, default=RUNS)
  args = parser.parse_args(argv)
  folder = pathlib.Path(tempfile.mkdtemp(prefix="shardport-ensemble-"))
  runs = [one_run(i, folder) for i in range(args.runs)]
  medians = [r["ratio"]["median"] for r in runs if r["exit"] == 0]
  run_record.write(
      args.json, "ensemble_runs", "`python -m compare --strategy ensemble` "
      "at its defaults (8 CNN members on digits, 7 epochs), 8 emulated CPU "
      "devices", command_line="python -m compare --strategy ensemble",
      runs=runs, median_of_medians=statistics.median(medians) if medians
      else None, all_bitwise=all(v == "bitwise" for r in runs
                                 for v in r.get("pmap_shard_map", [None])))
  return 0 if len(medians) == len(runs) else 1


if __name__ == "__main__":
  sys.exit(main())
