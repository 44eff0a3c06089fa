"""2 processes x 4 devices against 1 x 8: digests and examples/s, measured.

    python -m bench.runners.many_hosts_runs --json docs/measured/many_hosts.json

For every strategy, `python -m compare --strategy S --processes 2 --devices 4
--baseline` (the job, then the same command in one process of 8 devices
that also joins through jax.distributed, one after the other), and the same
comparison in one plain process with XLA's in-process collectives, for
scale. Records each run's examples/s in both layouts, their ratio and
whether the state digests are equal. About 8 minutes on 2 cores.
"""

import argparse
import json
import pathlib
import shutil
import sys
import tempfile

from bench.runners import run_record

STRATEGIES = ("data_parallel", "ensemble", "accumulation", "ensemble_data",
              "fsdp")
STEPS = "5"
# More windows where a window is short: data_parallel's step is the fastest.
WINDOWS = {"data_parallel": "10", "ensemble": "5", "accumulation": "5",
           "ensemble_data": "5", "fsdp": "5"}


def argv_for(strategy, json_path, processes):
  layout = (["--processes", "2", "--devices", "4", "--baseline"]
            if processes == 2 else ["--devices", "8"])
  return ["-m", "compare", "--strategy", strategy, "--steps", STEPS,
          "--windows", WINDOWS[strategy], *layout, "--json", str(json_path)]


def measure(strategy, folder):
  """The 2 x 4 job with its 1 x 8 baseline, then one plain process."""
  entry = {}
  for processes, name in ((2, "job"), (1, "plain")):
    path = folder / f"{strategy}_{name}.json"
    argv = argv_for(strategy, path, processes)
    code, seconds = run_record.run(argv, log=path.with_suffix(".log"))
    entry[f"{name}_command"] = run_record.command_line(
        argv_for(strategy, "R.json", processes))
    entry[f"{name}_exit"], entry[f"{name}_seconds"] = code, seconds
    if code != 0:
      return entry
    entry[name] = json.loads(path.read_text())
  job, plain = entry.pop("job"), entry.pop("plain")
  entry.update(verdict=job["verdict"],
               same_state_digests=job["baseline"]["same_state_digests"],
               runs={n: {**run, "plain_examples_per_s":
                         plain["runs"][n]["examples_per_s"]}
                     for n, run in job["baseline"]["runs"].items()})
  return entry


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  args = parser.parse_args(argv)
  folder = pathlib.Path(tempfile.mkdtemp(prefix="shardport-many-hosts-"))
  strategies = {s: measure(s, folder) for s in STRATEGIES}
  failed = [s for s, e in strategies.items()
            if e.get("job_exit") or e.get("plain_exit")]
  run_record.write(
      args.json, "many_hosts", "each strategy's default workload (the CNN "
      f"on digits), {STEPS} steps, 2 processes x 4 emulated CPU devices "
      "against 1 x 8, both through jax.distributed (gloo)",
      strategies=strategies, failed=failed,
      logs=str(folder) if failed else None)
  if not failed:
    shutil.rmtree(folder)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
