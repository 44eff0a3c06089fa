"""`--prove` can fail: a rewrite planted with a wrong spec fails at step 1
(the negative control of tests/test_rewrite.py's proof)."""

import pathlib

from compare import rewrite
from compare._src.prove import port as port_module
from compare._src.rewrite import rewrite_proof

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_a_rewrite_with_a_wrong_in_spec_fails_its_proof(tmp_path, capsys):
  # The pmap tutorial's program: its proof compiles in seconds (the
  # ResNet's rewrite is proved in tests/test_rewrite.py).
  source = ROOT / "examples" / "linear_regression" / "train_pmap.py"
  port = tmp_path / "train_port.py"
  assert rewrite.main([str(source), "-o", str(port)]) == 0
  # The step's arguments replicated, not split: every device takes device
  # 0's copy of the parameters and device 0's rows of the batch.
  text = port.read_text()
  spec = 'in_specs=(jax.P("num_devices"), jax.P("num_devices"))'
  assert text.count(spec) == 1
  port.write_text(text.replace(
      spec, 'in_specs=(jax.P(), jax.P("num_devices"))'))
  team_port = port_module.load("examples.linear_regression.prove:port")
  code = rewrite_proof.prove(team_port, source, port, steps=2)
  out = capsys.readouterr().out
  assert code == 1
  assert "verdict: fail, first at step 1: port vs pmap" in out


def test_prove_emulates_devices_as_compare_does(tmp_path):
  # A fresh process with no device count set: --prove emulates 8 CPU
  # devices (on one, the port's collectives would be the identity).
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  done = subprocess.run(
      [sys.executable, "-m", "compare.rewrite",
       str(ROOT / "examples" / "linear_regression" / "train_pmap.py"),
       "-o", str(tmp_path / "train_port.py"),
       "--prove", "examples.linear_regression.prove:port", "--steps", "2"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
      check=False)
  assert "8 cpu devices" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
  assert "verdict: pass" in done.stdout
