"""Our examples to global arrays, proved: `compare.rewrite --global --prove`.

    python -m bench.runners.rewrite_examples_runs --json docs/measured/rewrite_examples.json

Each pmap program of `examples/` is rewritten with `--global` and proved
against its own pmap step through its team's `compare.Port` (`--prove`,
`--steps 4`, 8 emulated CPU devices), one after the other in fresh
processes: the rewrite's exit, its places for a person, the stacked-layout
calls left in the written file, the proof's verdict and its line for port
against pmap. Their steps are built in modules their Ports call (never
called in the file), so the layout the global step is written to is the one
the Port declares (docs/REWRITE.md).
"""

import argparse
import datetime
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 4
# (the program's file under examples/, its Port)
PROGRAMS = tuple(
    (f"team_programs/{name}.py", f"examples.team_programs.{name}:port")
    for name in ("linen_conv_bn", "ema_clip", "own_optimizer",
                 "scan_accumulation", "static_flag_donate", "stax_optimizers",
                 "linen_lm_dropout", "nnx_bn_dropout")) + (
                     ("linear_regression/train_pmap.py",
                      "examples.linear_regression.prove:port"),
                     ("optax_tuple/train_pmap.py",
                      "examples.optax_tuple.prove:port"),
                     ("resnet/train_pmap.py", "examples.resnet.prove:port"))
# What the global step removes; none may be left where it was taken.
STACKED = re.compile(r"\b(?:replicate|unreplicate|common_utils\.shard|"
                     r"prefetch_to_device)\(")
PAIR = re.compile(r"^  port vs pmap +(.*)$", re.M)
VERDICT = re.compile(r"^verdict: (.*)$", re.M)
ERROR = re.compile(r"^compare\.rewrite: (.*)$", re.M)


def _calls_left(code: str) -> int:
  """The `STACKED` calls in `code`'s code, not in its comments or strings
  (our ResNet's comment names `replicate(state, axis_name=...)`)."""
  tokens = tokenize.generate_tokens(io.StringIO(code).readline)
  kept = " ".join(t.string for t in tokens
                  if t.type not in (tokenize.COMMENT, tokenize.STRING))
  return len(STACKED.findall(kept.replace(" (", "(").replace(" . ", ".")))


def run_one(program: str, spec: str, folder: pathlib.Path) -> dict:
  """One program rewritten with `--global --prove`, in its own process."""
  target = folder / program.replace("/", "_")
  start = time.perf_counter()
  done = subprocess.run(
      [sys.executable, "-m", "compare.rewrite", f"examples/{program}", "-o",
       str(target), "--global", "--prove", spec, "--steps", str(STEPS)],
      cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
      env={**os.environ, "PYTHONPATH": str(ROOT)})
  out = done.stdout
  taken = "global step not written" not in out and target.exists()
  verdict, pair = VERDICT.search(out), PAIR.search(out)
  error = ERROR.search(done.stderr)
  return {"program": f"examples/{program}", "port": spec,
          "rewrite_exit": done.returncode,
          "need_a_person": out.count("NEEDS A PERSON"),
          "global_step_written": taken,
          "declared": out.count("changed: the Port's layout:"),
          "stacked_calls_left": (_calls_left(target.read_text())
                                 if taken else None),
          "verdict": verdict.group(1) if verdict else None,
          "port_vs_pmap": pair.group(1).strip() if pair else None,
          "error": error.group(1) if error else None,
          "seconds": round(time.perf_counter() - start, 1),
          "report": [line for line in out.splitlines()
                     if "NEEDS A PERSON" in line or "the Port's layout" in line]}


def table(programs: list[dict]) -> str:
  """The runs as a markdown table (docs/REWRITE.md)."""
  rows = ["| program | exit | need a person | global step | "
          "replicate/shard/unreplicate/prefetch calls left | proof | "
          "port vs pmap |", "|---|---|---|---|---|---|---|"]
  for r in programs:
    proof = r["verdict"] or (f"not run: {r['error']}" if r["error"]
                             else "-")
    rows.append(
        f"| `{r['program']}` | {r['rewrite_exit']} | {r['need_a_person']} "
        f"| {'written' if r['global_step_written'] else 'not written'} | "
        f"{'-' if r['stacked_calls_left'] is None else r['stacked_calls_left']}"
        f" | {proof} | {r['port_vs_pmap'] or '-'} |")
  return "\n".join(rows)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--json", type=pathlib.Path, required=True)
  args = parser.parse_args(argv)
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  with tempfile.TemporaryDirectory(prefix="shardport-examples-") as folder:
    programs = []
    for program, spec in PROGRAMS:
      programs.append(run_one(program, spec, pathlib.Path(folder)))
      print(json.dumps({k: v for k, v in programs[-1].items()
                        if k != "report"}), flush=True)
  written = [r for r in programs if r["global_step_written"]]
  args.json.write_text(json.dumps({
      "what": "our examples' pmap programs rewritten with python -m "
              "compare.rewrite --global and proved with --prove (their "
              f"team's Port, {STEPS} steps, 8 emulated CPU devices)",
      "date": datetime.date.today().isoformat(),
      "jax_version": jax.__version__,
      "programs": programs, "table": table(programs),
      "count": len(programs), "written": len(written),
      "passed": sum(1 for r in written if r["verdict"]
                    and r["verdict"].startswith("pass"))}, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
