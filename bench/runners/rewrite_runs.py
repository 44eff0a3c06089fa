"""The rewrite of a flax-examples-style script, for the guide's page.

    python -m bench.runners.rewrite_runs --json docs/measured/rewrite.json

Copies tests/rewrite_inputs/flax_style_train.py to a scratch directory as
`train.py`, runs `python -m compare.rewrite train.py -o train_port.py`
there, and runs both scripts on 8 emulated CPU devices: the report, its
exit code, the pmap statement before and after, and whether the two
scripts printed the same.
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

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "rewrite_inputs" / "flax_style_train.py"
STEP = re.compile(r"^p_train_step = .*?(?=\n\n)", re.M | re.S)


def _block(text: str) -> str:
  """`text` as a markdown code block, indented (the guide's figures are
  not drawn inside fenced blocks)."""
  return "\n".join(f"    {line}" for line in text.splitlines())


def _run(args, cwd, **env):
  return subprocess.run([sys.executable, *args], cwd=cwd, text=True,
                        capture_output=True, timeout=600, check=False,
                        env={**os.environ, **env})


def measure() -> dict:
  folder = pathlib.Path(tempfile.mkdtemp(prefix="shardport-rewrite-"))
  try:
    shutil.copyfile(SCRIPT, folder / "train.py")
    done = _run(["-m", "compare.rewrite", "train.py", "-o", "train_port.py"],
                folder)
    devices = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8",
               "JAX_PLATFORMS": "cpu"}
    before = _run(["train.py"], folder, **devices).stdout
    after = _run(["train_port.py"], folder, **devices).stdout
    import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    port = STEP.search((folder / "train_port.py").read_text()).group(0)
    return {
        "what": ("python -m compare.rewrite on "
                 f"{SCRIPT.relative_to(ROOT)}, copied as train.py; both "
                 "scripts run on 8 emulated CPU devices"),
        "jax_version": jax.__version__,
        "rewrite_command": "python -m compare.rewrite train.py -o "
                           "train_port.py",
        "exit": done.returncode, "report": done.stdout.rstrip(),
        "report_block": _block(done.stdout.rstrip()),
        "port": port, "port_block": _block(port),
        "output": before.rstrip(), "output_block": _block(before.rstrip()),
        "same_output": before == after}
  finally:
    shutil.rmtree(folder, ignore_errors=True)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", required=True)
  args = parser.parse_args(argv)
  record = measure()
  pathlib.Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
  print(record["report"])
  return 0 if record["same_output"] and record["exit"] == 0 else 1


if __name__ == "__main__":
  sys.exit(main())
