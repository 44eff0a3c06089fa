"""`--global` on every program the rewrite is tested on, measured (issue 58).

    python -m docs.build_guide --measure rewrite_global

For each input of tests/rewrite_inputs that `--global` writes a step for
(the pmap tutorial, JAX's SPMD MNIST on a synthetic `datasets.mnist()`, the
flax-examples-style script, a steps module, a stax steps module, a step
factory, two programs written for many hosts): `python -m compare.rewrite
FILE -o OUT --global [--prove PORT]` (MNIST: `--prove __main__`),
then the written file read (lines before and after, lines added and removed
by a diff, `_pmap_` names, `block_until_ready` calls it did not have) and,
for a script, the original and the port run on 8 emulated CPU devices and
every number they print compared (a program that joins jax.distributed
also in 2 processes x 4 devices, every line of every process). A steps
module prints nothing: its
Port's `--prove` is its check. Given a checkout of google/flax (`--flax` or
FLAX_CHECKOUT), flax's examples/nlp_seq and examples/imagenet as written
too (bench/runners/rewrite_global_flax.py); without one their rows say why they
were not run. One row per program, one markdown table.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from bench.probes import rewrite_many_hosts
from bench.runners.rewrite_written import code_lines
from bench.runners.rewrite_written import written

ROOT = pathlib.Path(__file__).resolve().parents[2]
INPUTS = ROOT / "tests" / "rewrite_inputs"
PORTS = "tests.rewrite_inputs"
# (program, its Port for --prove or None, runs as a script)
PROGRAMS = (
    ("tutorial_linear_regression", f"{PORTS}.rewrite_ports:tutorial_port",
     True),
    # Its step is made under `if __name__ == "__main__":`: both files are
    # run as scripts to be proved.
    ("jax_spmd_mnist", "__main__", True),
    ("flax_style_train", f"{PORTS}.rewrite_ports:flax_style_port", True),
    ("steps_module", f"{PORTS}.steps_module_port:port", False),
    ("steps_module_stax", f"{PORTS}.steps_module_port:update_port", False),
    ("steps_factory", f"{PORTS}.steps_module_port:factory_port", False),
    # Written for many hosts: each joins jax.distributed (run in 2x4 too).
    ("multihost_tutorial",
     f"{PORTS}.rewrite_ports:multihost_tutorial_port", True),
    ("multihost_train", f"{PORTS}.rewrite_ports:multihost_port", True))
NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+")
# The scripts import nothing of this repository (MNIST's `examples` is the
# synthetic one beside it).
_ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu"}


def _run(args, cwd):
  return subprocess.run([sys.executable, *args], cwd=cwd, env=_ENV,
                        text=True, capture_output=True, timeout=900,
                        check=False)


def _numbers(stdout: str) -> list[str]:
  """Every number a script prints, its wall times left out (MNIST's
  'Epoch N in T sec')."""
  lines = [l for l in stdout.splitlines() if " sec" not in l]
  return NUMBER.findall("\n".join(lines))


def _mnist_folder(folder: pathlib.Path) -> None:
  """A synthetic `examples.datasets` beside the copied MNIST example, as
  tests/test_rewrite_global_elsewhere.py gives it."""
  mnist = (INPUTS / "mnist_datasets.py").read_text()
  (folder / "examples").mkdir()
  (folder / "examples" / "__init__.py").write_text("")
  (folder / "examples" / "datasets.py").write_text(mnist)


def measure_one(name, port, script, folder: pathlib.Path) -> dict:
  source = folder / f"{name}.py"
  shutil.copyfile(INPUTS / f"{name}.py", source)
  if name == "jax_spmd_mnist":
    _mnist_folder(folder)
  target = folder / f"{name}_global.py"
  # The repository's file where a Port names it (its pmap_step is that
  # module's); the copy beside its data otherwise.
  given = INPUTS / f"{name}.py" if port not in (None, "__main__") else source
  done = _run(["-m", "compare.rewrite", str(given), "-o", str(target),
               "--global"] + (["--prove", port, "--steps", "3"]
                              if port else []), ROOT)
  row = {"program": f"tests/rewrite_inputs/{name}.py",
         **written(source.read_text(), target.read_text(), done, port)}
  if script:
    original, port_run = _run([source.name], folder), _run([target.name],
                                                           folder)
    numbers = _numbers(original.stdout)
    row["numbers"] = len(numbers)
    row["numbers_equal"] = (original.returncode == port_run.returncode == 0
                            and numbers == _numbers(port_run.stdout)
                            and bool(numbers))
    if "jax.distributed.initialize" in source.read_text():
      # Every line of every process, in 2 processes x 4 devices (gloo).
      row["many_hosts_equal"] = (rewrite_many_hosts.run_job(source, 2, 4)
                                 == rewrite_many_hosts.run_job(target, 2, 4))
  return row


def table(rows) -> str:
  head = ("| program | pmaps | lines before → after (added, removed) | "
          "net per pmap | `_pmap_` names | waits added | printed numbers "
          "equal | `--prove` |\n|---|---|---|---|---|---|---|---|")
  body = []
  for r in rows:
    if "not_run" in r:  # a flax example without a flax checkout
      body.append(f"| {r['program']} | not run: {r['not_run']} "
                  "| - | - | - | - | - | - |")
      continue
    numbers = (f"{'yes' if r['numbers_equal'] else 'NO'} ({r['numbers']}"
               f"{r.get('numbers_what', '')})" if "numbers" in r
               else r.get("no_numbers", "- (prints nothing: a steps module)"))
    if "many_hosts_equal" in r:
      numbers += (f"; 2x4: {'yes' if r['many_hosts_equal'] else 'NO'}, "
                  "every process")
    numbers += r.get("numbers_also", "")
    net = (r["lines_after"] - r["lines_before"]) / max(r["pmaps"], 1)
    program = (f"`{r['program']}`" if r["program"].startswith("tests/")
               else r["program"])
    body.append(
        f"| {program} | {r['pmaps']} | {r['lines_before']} → "
        f"{r['lines_after']} (+{r['added']}, -{r['removed']}) | {net:+.0f} "
        f"| {r['pmap_names']} | {r['waits_added']} | {numbers} | "
        f"{r['prove']}{_reduces(r.get('prove_reduces'))} |")
  return head + "\n" + "\n".join(body)


def _reduces(counts) -> str:
  """The proof's all-reduces per step, where its table counts them."""
  shown = {k: v for k, v in (counts or {}).items() if v != "-"}
  return ("; all-reduces: " + ", ".join(f"{k} {v}" for k, v in shown.items())
          if shown else "")


def measure(flax: pathlib.Path | None) -> dict:
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from bench.runners import rewrite_global_flax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  rows = []
  for name, port, script in PROGRAMS:
    folder = pathlib.Path(tempfile.mkdtemp(prefix="shardport-global-"))
    try:
      rows.append(measure_one(name, port, script, folder))
    finally:
      shutil.rmtree(folder, ignore_errors=True)
    print(rows[-1], flush=True)
  # flax's nlp_seq and imagenet as written, where a checkout is given.
  rows += rewrite_global_flax.rows(flax)
  tutorial = rows[0]["diff"]
  expert = (INPUTS / "tutorial_expert_port.py").read_text()
  return {"tutorial_diff_block": "\n".join(
      f"    {line}" for line in tutorial.splitlines()),
          # The tutorial, the tool's port and a JAX engineer's, in lines
          # and in lines of code.
          "tutorial_lines": {
              "tutorial": rows[0]["lines_before"],
              "tool": rows[0]["lines_after"],
              "expert": len(expert.splitlines()),
              "tutorial_code": rows[0]["code_lines_before"],
              "tool_code": rows[0]["code_lines_after"],
              "expert_code": code_lines(expert)},
          "what": "python -m compare.rewrite FILE --global [--prove PORT "
                  "--steps 3] on each input of tests/rewrite_inputs it "
                  "writes a step for, and on flax's examples/nlp_seq and "
                  "examples/imagenet as written and examples/lm1b at "
                  "558be01e^ (with --flax or "
                  "FLAX_CHECKOUT); scripts run on 8 emulated CPU devices",
          "command": "python -m docs.build_guide --measure rewrite_global"
                     + (f" (FLAX_CHECKOUT={flax})" if flax else ""),
          "flax_checkout": str(flax) if flax else None,
          "jax_version": jax.__version__, "rows": rows,
          "table": table(rows)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  parser.add_argument("--flax", type=pathlib.Path,
                      default=os.environ.get("FLAX_CHECKOUT") or None,
                      help="a checkout of google/flax: its nlp_seq and "
                      "imagenet measured too (default: $FLAX_CHECKOUT)")
  args = parser.parse_args(argv)
  record = measure(args.flax)
  pathlib.Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
  print(record["table"])
  ok = all("not_run" in r or r["pmap_names"] == 0 and r["waits_added"] <= 0
           and r["lines_after"] - r["lines_before"] <= 10 * max(r["pmaps"], 1)
           and r.get("numbers_equal", True)
           and r.get("many_hosts_equal", True) and r["prove"] in ("pass", "-")
           for r in record["rows"])
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
