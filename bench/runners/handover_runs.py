"""The measured proof that a running job moves between the backends.

    python -m bench.runners.handover_runs --json docs/measured/handover.json

For every strategy at its defaults on 8 emulated devices: 200 steps of
pmap alone, of the port alone, and 100 steps of one then 100 of the other on
the same workdir, in both directions; and an 8-member ensemble saved by pmap
at step 100 that the port continues on 4 and on 2 devices. Records each
job's `state_digest`, test accuracy and checkpoint costs (`result.json`).
About 6 minutes on 2 cores.
"""

import argparse
import json
import pathlib
import shutil
import sys
import tempfile

from bench.runners import run_record

# Not ensemble_data: its pmap run (nested pmap) cannot run on jax 0.10.
STRATEGIES = ("data_parallel", "ensemble", "accumulation", "fsdp")
HALF, FULL = 100, 200
PROGRAM = {"pmap": "legacy_pmap.train", "shard_map": "sharded.train"}
# job name -> the legs it runs on one workdir: (backend, steps, devices)
JOBS = {"pmap_200": [("pmap", FULL, 8)],
        "shard_map_200": [("shard_map", FULL, 8)],
        "pmap_100_shard_map_200": [("pmap", HALF, 8), ("shard_map", FULL, 8)],
        "shard_map_100_pmap_200": [("shard_map", HALF, 8), ("pmap", FULL, 8)]}
DEVICE_COUNTS = {"pmap_100_shard_map_200_on_4": [("pmap", HALF, 8),
                                                 ("shard_map", FULL, 4)],
                 "pmap_100_shard_map_200_on_2": [("pmap", HALF, 8),
                                                 ("shard_map", FULL, 2)]}
KEPT = ("state_digest", "test_accuracy", "steps_per_s", "save_s",
        "save_s_max", "save_wait_s", "restore_s", "resumed_from",
        "resumed_from_backend", "devices", "checkpoint_every")


def leg_argv(strategy, backend, steps, devices, workdir):
  return ["-m", PROGRAM[backend], "--strategy", strategy, "--steps",
          str(steps), "--devices", str(devices), "--workdir", str(workdir)]


def run_job(strategy, legs, folder):
  """The legs one after another on one workdir; the last leg's result."""
  workdir = pathlib.Path(tempfile.mkdtemp(dir=folder))
  commands, legs_kept = [], []
  for i, (backend, steps, devices) in enumerate(legs):
    argv = leg_argv(strategy, backend, steps, devices, "W")
    commands.append(run_record.command_line(argv))
    code, seconds = run_record.run(
        leg_argv(strategy, backend, steps, devices, workdir),
        log=workdir.with_suffix(f".leg{i}.log"))
    if code != 0:
      return {"commands": commands, "exit": code}
    result = json.loads((workdir / "result.json").read_text())
    legs_kept.append({"seconds": seconds,
                      **{k: result.get(k) for k in KEPT}})
  shutil.rmtree(workdir)
  return {"commands": commands, "exit": 0, "legs": legs_kept,
          **{k: legs_kept[-1][k] for k in ("state_digest", "test_accuracy")}}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  args = parser.parse_args(argv)
  folder = tempfile.mkdtemp(prefix="shardport-handover-")
  strategies = {}
  for strategy in STRATEGIES:
    jobs = {**JOBS, **(DEVICE_COUNTS if strategy == "ensemble" else {})}
    strategies[strategy] = {name: run_job(strategy, legs, folder)
                            for name, legs in jobs.items()}
    print(strategy, {n: j.get("state_digest", f"exit {j['exit']}")[:16]
                     for n, j in strategies[strategy].items()}, flush=True)
  failed = [f"{s}/{n}" for s, jobs in strategies.items()
            for n, j in jobs.items() if j["exit"] != 0]
  run_record.write(
      args.json, "handover", "each strategy's training program at its "
      "defaults (the CNN on digits), 8 emulated CPU devices unless stated",
      half=HALF, full=FULL, strategies=strategies, failed=failed,
      logs=folder if failed else None)
  if not failed:
    shutil.rmtree(folder)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
