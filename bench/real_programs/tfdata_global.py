"""A program fed by a real tf.data pipeline that batches per device,
through `python -m compare.rewrite --global`, run beside its original.

    python -m docs.build_guide --measure rewrite_tfdata
    python -m bench.real_programs.tfdata_global --json OUT.json

The program is tests/rewrite_inputs/tfdata_device_batched.py (issue 74):
flax's imagenet family's input shape, `ds.batch(PER_DEVICE).batch(
jax.local_device_count())` over this process's shard of a
`tf.data.Dataset`, turned to numpy and through `prefetch_to_device`, into a
donating pmap step. It is rewritten with `--global`, and the original, the
rewrite and a plant are run as one job of 1 process x 8 emulated CPU
devices and one of 2 processes x 4 joined by jax.distributed
(bench.probes.rewrite_many_hosts.run_programs): every line each process
prints must equal the original's, bitwise, and the job must end within
its time (no wait). The plants show the comparison can fail: in 1 x 8
every device given the first device's rows, in 2 x 4 the mesh over this
process's devices alone. Needs tensorflow-cpu beside jax (CI has none:
tests/test_rewrite_tfdata.py reads the rewrite's text only); without it,
one line and exit 2.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import pathlib
import re
import sys
import tempfile
import time

from bench.probes import rewrite_many_hosts
from compare import rewrite

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests" / "rewrite_inputs" / "tfdata_device_batched.py"
# The rows each batch holds, its two leading axes merged, and the plant
# that gives every device the first device's rows in their place.
ROWS = "_x.reshape((-1,) + _x.shape[2:])"
FIRST_DEVICE_ROWS = "_x[:1].repeat(_x.shape[0], 0).reshape((-1,) + _x.shape[2:])"


def written(workdir: pathlib.Path) -> dict:
  """The `--global` rewrite and its plants, as files in `workdir`."""
  port = workdir / "tfdata_global.py"
  code = rewrite.main([str(PROGRAM), "-o", str(port), "--global"])
  text = port.read_text()
  paths = {"original": PROGRAM, "global": port, "exit": code}
  for name, (right, wrong) in (
      ("plant_rows", (ROWS, FIRST_DEVICE_ROWS)),
      ("plant_mesh", (rewrite_many_hosts.GLOBAL_MESH,
                      rewrite_many_hosts.LOCAL_MESH))):
    if text.count(right) != 1:
      raise SystemExit(f"{port}: {right!r} is not written once: the plant "
                       f"{name} has no place")
    paths[name] = workdir / f"tfdata_{name}.py"
    paths[name].write_text(text.replace(right, wrong))
  return paths


def _job(workdir, paths, plant, processes, devices) -> dict:
  """One job of the original, the rewrite and `plant`: equal or not."""
  start = time.perf_counter()
  scripts = [paths["original"], paths["global"], paths[plant]]
  runs = rewrite_many_hosts.run_programs(workdir, scripts, processes,
                                         devices)
  original = [r["tfdata_device_batched"] for r in runs]
  return {
      "layout": f"{processes}x{devices}", "seconds": round(
          time.perf_counter() - start, 1),
      "lines_each_process": [len(o.splitlines()) for o in original],
      "processes_agree": all(o == original[0] for o in original),
      "global_equal": all(r["tfdata_global"] == o
                          for r, o in zip(runs, original)),
      "plant": plant, "plant_caught": all(
          r[f"tfdata_{plant}"] != o for r, o in zip(runs, original)),
      "original_printed": original[0].splitlines()}


def measure() -> dict:
  """The rewrite read, then both jobs run."""
  with tempfile.TemporaryDirectory() as work:
    workdir = pathlib.Path(work)
    paths = written(workdir)
    before, after = PROGRAM.read_text(), paths["global"].read_text()
    jobs = [_job(workdir, paths, "plant_rows", 1, 8),
            _job(workdir, paths, "plant_mesh", 2, 4)]
  return {
      "what": "tests/rewrite_inputs/tfdata_device_batched.py (a tf.data "
              "pipeline batching per device, then by "
              "jax.local_device_count()) through python -m compare.rewrite "
              "--global; original, rewrite and a plant run in 1x8 and 2x4",
      "command": "python -m docs.build_guide --measure rewrite_tfdata",
      "jax_version": importlib.metadata.version("jax"),
      "versions": {name: importlib.metadata.version(name) for name in (
          "jax", "jaxlib", "flax", "tensorflow", "tensorflow-cpu",
          "numpy")},
      "rewrite_exit": paths["exit"],
      "lines_before": len(before.splitlines()),
      "lines_after": len(after.splitlines()),
      "pmap_names": len(re.findall(r"\b_pmap_\w*", after)),
      "waits_added": after.count("block_until_ready") - before.count(
          "block_until_ready"),
      "jobs": jobs}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True, type=pathlib.Path)
  args = parser.parse_args(argv)
  if importlib.util.find_spec("tensorflow") is None:
    print("tfdata_global: this Python has no tensorflow (pip install "
          "tensorflow-cpu)", file=sys.stderr)
    return 2
  record = measure()
  args.json.write_text(json.dumps(record, indent=1) + "\n")
  for job in record["jobs"]:
    print({k: v for k, v in job.items() if k != "original_printed"})
  ok = record["pmap_names"] == 0 and record["waits_added"] <= 0 and all(
      j["global_equal"] and j["processes_agree"] and j["plant_caught"]
      for j in record["jobs"])
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
