"""Public pmap programs, rewritten by `python -m compare.rewrite` and run
beside their originals on 8 emulated CPU devices.

    python -m bench.real_programs.run --flax PATH --tutorial PATH \
        --json docs/measured/real_programs.json

Fetches nothing: `--flax` is a checkout of google/flax (its
`examples/nlp_seq` is run as written, on synthetic CoNLL-U files), and
`--tutorial` the JAX pmap tutorial's linear regression as the tutorial
writes it (`bench/real_programs/pmap_tutorial.py`, the default). Run it with a Python that has tensorflow-cpu and tensorboard
beside this project (nlp_seq reads its data with tf.data and logs through
tensorboard); CI does not, tensorflow is large. Each program is rewritten
(`compare.rewrite`: its exit code and the places it leaves to a person),
then the original and the port are run and every number they log is
compared: nlp_seq's tensorboard scalars (every one but `steps per second`,
at full float32 precision), the stand-ins' printed numbers. The tutorial,
whose data is unseeded, is run `--tutorial-runs` times each to count hangs
(the rendezvous abort of docs/jax-facts.md).
"""

import argparse
import datetime
import difflib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench.real_programs import conll

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEVICES = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
           "CUDA_VISIBLE_DEVICES": ""}
NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+")
NLP_SEQ_FLAGS = ["--num_train_steps=20", "--eval_frequency=5",
                 "--batch_size=64", "--max_length=64"]


def _python(args, cwd, timeout=900):
  start = time.perf_counter()
  done = subprocess.run([sys.executable, *map(str, args)], cwd=cwd,
                        text=True, capture_output=True, timeout=timeout,
                        check=False, env={**os.environ, **DEVICES,
                                          "PYTHONPATH": str(ROOT)})
  return done, time.perf_counter() - start


# What the global step removes; none may be left where it was taken.
STACKED = re.compile(r"\b(?:replicate|unreplicate|common_utils\.shard|"
                     r"prefetch_to_device)\(")


def _rewrite(source: pathlib.Path, target: pathlib.Path,
             global_step: bool = False) -> dict:
  done, _ = _python(["-m", "compare.rewrite", source, "-o", target,
                     *(["--global"] if global_step else [])], ROOT)
  summary = done.stdout.strip().splitlines()
  left = (STACKED.findall(target.read_text()) if target.exists() else [])
  return {"rewrite_exit": done.returncode, "stacked_calls_left": len(left),
          "need_a_person": done.stdout.count("NEEDS A PERSON"),
          "rewritten": int(re.search(r"(\d+) pmap\(s\) rewritten",
                                     done.stdout).group(1))
                       if "rewritten" in done.stdout else 0,
          "report": summary}


def _largest_relative(want: list[float], got: list[float]) -> float:
  worst = 0.0
  for a, b in zip(want, got):
    if a != b:
      worst = max(worst, abs(a - b) / max(abs(a), abs(b)))
  return worst


def _scalars(folder: pathlib.Path) -> dict:
  """Every tensorboard scalar under `folder`: {(run, tag, step): value}."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  values = {}
  for path in sorted(folder.rglob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        if value.tag != "steps per second":
          values[(path.parent.name, value.tag, event.step)] = float(
              tf.make_ndarray(value.tensor))
  return values


def nlp_seq(flax: pathlib.Path, work: pathlib.Path,
            global_step: bool = False) -> dict:
  """flax's examples/nlp_seq as written, and its rewrite."""
  folder = work / "nlp_seq"
  shutil.copytree(flax / "examples" / "nlp_seq", folder)
  conll.write(folder / "train.conll", 600, seed=0)
  conll.write(folder / "dev.conll", 100, seed=1)
  record = {"program": "flax examples/nlp_seq (as written)",
            **_rewrite(folder / "train.py", folder / "train_port.py",
                       global_step)}
  runs = {}
  for name in ("train.py", "train_port.py"):
    model_dir = folder / f"model_{name[:-3]}"
    done, seconds = _python(
        [name, f"--train={folder / 'train.conll'}",
         f"--dev={folder / 'dev.conll'}", f"--model_dir={model_dir}",
         *NLP_SEQ_FLAGS], folder)
    runs[name] = (done, seconds, _scalars(model_dir) if done.returncode == 0
                  else {})
  (before, t0, want), (after, t1, got) = runs["train.py"], runs[
      "train_port.py"]
  record.update(_compared(before, after, t0, t1))
  keys = sorted(want)
  record["numbers"] = len(keys)
  record["same_numbers"] = keys == sorted(got) and bool(keys)
  if record["same_numbers"]:
    record["largest_relative"] = _largest_relative(
        [want[k] for k in keys], [got[k] for k in keys])
  record["command"] = f"python train.py {' '.join(NLP_SEQ_FLAGS)}"
  if global_step:
    record["diff"] = _diff(folder / "train.py", folder / "train_port.py")
  return record


def _diff(source: pathlib.Path, port: pathlib.Path) -> str:
  """The rewrite's changes to the program, without the helpers it adds
  (docs/REWRITE.md shows them apart)."""
  from compare._src.rewrite import rewrite_helpers  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  written = port.read_text().replace(rewrite_helpers.HELPERS, "")
  return "".join(difflib.unified_diff(
      source.read_text().splitlines(keepends=True),
      written.splitlines(keepends=True), "train.py", "train_port.py", n=1))


def _compared(before, after, t0, t1) -> dict:
  record = {"original_exit": before.returncode, "port_exit": after.returncode,
            "ran": before.returncode == 0 and after.returncode == 0,
            "seconds": [round(t0, 1), round(t1, 1)]}
  for name, done in (("original", before), ("port", after)):
    if done.returncode:
      record[f"{name}_error"] = done.stderr.strip().splitlines()[-3:]
  return record


def printed_program(name: str, script: pathlib.Path,
                    work: pathlib.Path, global_step: bool = False) -> dict:
  """A script that prints its numbers, and its rewrite."""
  source = work / script.name
  shutil.copyfile(script, source)
  port = work / f"{script.stem}_port.py"
  record = {"program": name, **_rewrite(source, port, global_step)}
  before, t0 = _python([source], work)
  after, t1 = _python([port], work)
  record.update(_compared(before, after, t0, t1))
  want = [float(n) for n in NUMBER.findall(before.stdout)]
  got = [float(n) for n in NUMBER.findall(after.stdout)]
  record["numbers"] = len(want)
  record["same_numbers"] = (NUMBER.sub("#", before.stdout) == NUMBER.sub(
      "#", after.stdout) and len(want) == len(got) and bool(want))
  if record["same_numbers"]:
    record["largest_relative"] = _largest_relative(want, got)
  return record


def tutorial(script: pathlib.Path, work: pathlib.Path, runs: int) -> dict:
  """The pmap tutorial as written: `runs` runs of each, hangs counted."""
  source = work / "tutorial.py"
  shutil.copyfile(script, source)
  port = work / "tutorial_port.py"
  record = {"program": "JAX pmap tutorial (as written, unseeded data)",
            **_rewrite(source, port)}
  for name, path in (("original", source), ("port", port)):
    outcomes = []
    for _ in range(runs):
      try:
        done, seconds = _python([path], work, timeout=180)
        outcomes.append((done.returncode, round(seconds, 1)))
      except subprocess.TimeoutExpired:
        outcomes.append(("timeout", 180))
    record[f"{name}_runs"] = outcomes
    record[f"{name}_ok"] = sum(1 for code, _ in outcomes if code == 0)
  record["ran"] = record["port_ok"] == runs
  return record


def table(programs: list[dict]) -> str:
  """The programs as a markdown table (docs/REWRITE.md)."""
  rows = ["| program | rewrite exit | need a person | pmaps rewritten | "
          "replicate/shard/unreplicate/prefetch calls left | "
          "ran (original, port) | numbers compared | largest relative "
          "difference |", "|---|---|---|---|---|---|---|---|"]
  for r in programs:
    if "original_ok" in r:
      ran = (f"{r['original_ok']} and {r['port_ok']} of "
             f"{len(r['port_runs'])} runs")
      numbers, worst = "- (unseeded data)", "-"
    else:
      ran = f"exit {r['original_exit']}, exit {r['port_exit']}"
      numbers = str(r["numbers"]) + ("" if r["same_numbers"] else
                                     " (not the same numbers)")
      worst = (f"{r['largest_relative']:.1e}" if "largest_relative" in r
               else "-")
    rows.append(f"| {r['program']} | {r['rewrite_exit']} | "
                f"{r['need_a_person']} | {r['rewritten']} | "
                f"{r.get('stacked_calls_left', '-')} | {ran} | "
                f"{numbers} | {worst} |")
  return "\n".join(rows)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--flax", type=pathlib.Path,
                      default=os.environ.get("FLAX_CHECKOUT"),
                      help="a checkout of google/flax (default: "
                           "$FLAX_CHECKOUT)")
  parser.add_argument("--tutorial", type=pathlib.Path,
                      default=HERE / "pmap_tutorial.py",
                      help="the pmap tutorial's script, as written")
  parser.add_argument("--tutorial-runs", type=int, default=20)
  parser.add_argument("--global", dest="global_step", action="store_true",
                      help="the second step (`compare.rewrite --global`): "
                      "nlp_seq, the stand-ins and tests/rewrite_inputs' "
                      "scripts, each port's numbers against the original's")
  parser.add_argument("--json", type=pathlib.Path, required=True)
  args = parser.parse_args(argv)
  if args.flax is None:
    parser.error("--flax: give a checkout of google/flax (or FLAX_CHECKOUT)")
  for path in (args.flax / "examples" / "nlp_seq", args.tutorial):
    if not path.exists():
      parser.error(f"{path} does not exist")
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import tensorflow as tf  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  work = pathlib.Path(tempfile.mkdtemp(prefix="shardport-real-"))
  inputs = ROOT / "tests" / "rewrite_inputs"
  try:
    programs = [
        nlp_seq(args.flax, work, True),
        *[printed_program(name, path, work, True) for name, path in (
            ("stand-in: examples/wmt's pmaps", HERE / "wmt_constructs.py"),
            ("stand-in: examples/imagenet's pmaps",
             HERE / "imagenet_constructs.py"),
            ("a flax-examples-style script (tests/rewrite_inputs)",
             inputs / "flax_style_train.py"),
            ("the pmap tutorial, seeded (tests/rewrite_inputs)",
             inputs / "tutorial_linear_regression.py"),
            ("a pmap made in main (tests/rewrite_inputs)",
             inputs / "local_pmap_train.py"))]] if args.global_step else [
        nlp_seq(args.flax, work),
        printed_program("stand-in: examples/wmt's pmaps",
                        HERE / "wmt_constructs.py", work),
        printed_program("stand-in: examples/imagenet's pmaps",
                        HERE / "imagenet_constructs.py", work),
        tutorial(args.tutorial, work, args.tutorial_runs)]
  finally:
    shutil.rmtree(work, ignore_errors=True)
  result = {"what": "pmap programs written elsewhere, rewritten by "
                    "python -m compare.rewrite; original and port run on 8 "
                    "emulated CPU devices, every logged number compared",
            "date": datetime.date.today().isoformat(),
            "jax_version": jax.__version__,
            "tensorflow_version": tf.__version__,
            "command": "python -m bench.real_programs.run " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "programs": programs, "table": table(programs)}
  args.json.write_text(json.dumps(result, indent=1) + "\n")
  if args.global_step and programs[0].get("diff"):
    # docs/REWRITE.md shows it whole (a part, beside the JSON).
    args.json.with_suffix(".nlp_seq.md").write_text(
        "# flax's examples/nlp_seq to global arrays (`python -m "
        "compare.rewrite --global`)\n\n```diff\n" + programs[0]["diff"]
        + "```\n")
  for record in programs:
    print(json.dumps({k: v for k, v in record.items()
                      if k not in ("report", "original_runs",
                                   "port_runs")}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
