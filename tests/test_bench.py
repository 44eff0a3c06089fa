"""The measurement runners' own plumbing (bench/): what they write must not
change what they measure next."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_writing_a_record_leaves_jax_unimported(tmp_path):
  # lockstep_runs writes after every run, then emulates 8 CPU devices for
  # its in-process cost group: which only works while jax is not imported.
  out = tmp_path / "record.json"
  script = ("import sys\n"
            "from bench import run_record\n"
            f"run_record.write({str(out)!r}, 'probe', 'nothing ran', a=1)\n"
            "assert 'jax' not in sys.modules, 'jax imported'\n")
  done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, text=True,
                        capture_output=True, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  record = json.loads(out.read_text())
  assert record["jax_version"].count(".") == 2 and record["a"] == 1
