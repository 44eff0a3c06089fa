"""`--global --prove __main__`: a step made under `if __name__ ==
"__main__":`, where no Port can import it, proved by running both files as
scripts (issue 58: JAX's SPMD MNIST example had no `--prove`).

The proof must pass the rewrite as written and fail a port wrong from its
first step, one made wrong from a later step, and one with pmap's
`psum` turned into a `pmean`; bad input is one line and exit 2.
"""

import dataclasses
import pathlib
import re
import subprocess
import sys

import pytest

from compare import rewrite
from compare import testing
from compare._src.prove.port import PortError
from compare._src.rewrite.proof import on_port_layout
from compare._src.rewrite.proof import rewrite_proof
from compare._src.rewrite.proof import script_proof
from tests.test_rewrite_global_elsewhere import MNIST

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = '''"""A pmap step made under `__main__`, as JAX's SPMD MNIST makes it."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def loss(w, batch):
  x, y = batch
  return jnp.mean((x @ w - y) ** 2)


if __name__ == "__main__":
  n = jax.device_count()

  @functools.partial(jax.pmap, axis_name="i")
  def update(w, batch):
    grads = lax.psum(jax.grad(loss)(w, batch), "i")
    return w - 0.01 * grads

  w = np.broadcast_to(np.ones((4, 2), np.float32), (n, 4, 2))
  rng = np.random.RandomState(0)
  for step in range(6):
    x = rng.randn(n, 8, 4).astype(np.float32)
    y = rng.randn(n, 8, 2).astype(np.float32)
    w = update(w, (x, y))
  print(float(np.asarray(w[0]).sum()))
'''


def _rewritten(tmp_path, plant=None):
  source, target = tmp_path / "train.py", tmp_path / "train_global.py"
  source.write_text(SCRIPT)
  assert rewrite.main([str(source), "-o", str(target), "--global"]) == 0
  if plant:
    text = target.read_text()
    assert plant[0] in text, text
    target.write_text(text.replace(plant[0], plant[1]))
  return source, target


def _proved(capsys, source, target, steps=4):
  port, written = script_proof.port_of_scripts(source, target, steps)
  code = rewrite_proof.prove(port, source, target, global_step=True,
                             written=written)
  return code, capsys.readouterr().out


def test_the_rewrite_of_a_step_made_in_main_is_proved(tmp_path, capsys):
  code, out = _proved(capsys, *_rewritten(tmp_path))
  assert code == 0, out
  assert "verdict: pass (2 of 2 leaves judged)" in out
  assert "port vs pmap          lockstep   bitwise" in out


@pytest.mark.parametrize("plant", [
    ("0.01 * grads", "0.0101 * grads"),
    ('lax.psum(jax.grad(loss)(w, batch), "i")',
     'lax.pmean(jax.grad(loss)(w, batch), "i")')])
def test_a_wrong_port_fails_at_its_first_step(tmp_path, capsys, plant):
  code, out = _proved(capsys, *_rewritten(tmp_path, plant))
  assert code == 1, out
  assert "verdict: fail, first at step 1: port vs pmap" in out


def test_a_mistake_from_a_later_step_fails_there(tmp_path):
  port, (step, axes, _) = script_proof.port_of_scripts(*_rewritten(tmp_path),
                                                       5)
  # The written step on the Port's layout, as `rewrite_proof.prove` runs it.
  proved = dataclasses.replace(port, port_step=on_port_layout.on_global_mesh(
      step, axes, port.mesh.size))
  testing.assert_port_equivalent(proved, steps=5)
  with pytest.raises(AssertionError, match="first at step 4: port vs pmap"):
    testing.assert_port_equivalent(proved, steps=5,
                                   control="update-1pct-at:4")


def test_the_scripts_own_modules_are_let_go(tmp_path):
  (tmp_path / "helper_of_the_script.py").write_text("VALUE = 1\n")
  source, target = _rewritten(tmp_path)
  source.write_text(SCRIPT.replace(
      "import functools", "import functools\nimport helper_of_the_script"))
  script_proof.port_of_scripts(source, target, 2)
  assert "helper_of_the_script" not in sys.modules


def test_a_script_that_calls_no_pmap_is_refused(tmp_path):
  source, target = _rewritten(tmp_path)
  source.write_text(SCRIPT.replace("w = update(w, (x, y))", "pass"))
  with pytest.raises(PortError, match="called 0 pmap"):
    script_proof.port_of_scripts(source, target, 2)


def test_a_step_called_otherwise_is_refused_with_what_to_write(tmp_path):
  source, target = _rewritten(tmp_path)
  source.write_text(SCRIPT.replace(
      "def update(w, batch):", "def update(w, batch, scale):").replace(
          "w = update(w, (x, y))", "w = update(w, (x, y), np.ones(n))"))
  with pytest.raises(PortError, match=r"called as step\(state, batch\); "
                     "for another call, write the program's compare.Port"):
    script_proof.port_of_scripts(source, target, 2)


def test_mnist_as_written_is_proved_from_the_command_line(tmp_path):
  (tmp_path / "examples").mkdir()
  (tmp_path / "examples" / "__init__.py").write_text("")
  (tmp_path / "examples" / "datasets.py").write_text(MNIST)
  source = tmp_path / "spmd_mnist.py"
  source.write_text((ROOT / "tests" / "rewrite_inputs" /
                     "jax_spmd_mnist.py").read_text())
  done = subprocess.run(
      [sys.executable, "-m", "compare.rewrite", str(source), "-o",
       str(tmp_path / "port.py"), "--global", "--prove", "__main__",
       "--steps", "3"], cwd=ROOT, capture_output=True, text=True,
      timeout=600, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  assert re.search(r"^verdict: pass \(7 of 7 leaves judged\)$", done.stdout,
                   re.M), done.stdout


@pytest.mark.parametrize("flags", [[], ["--global", "--processes", "2"]])
def test_prove_main_without_global_or_in_processes_is_one_line(
    tmp_path, capsys, flags):
  source = tmp_path / "train.py"
  source.write_text(SCRIPT)
  code = rewrite.main([str(source), "-o", str(tmp_path / "out.py"),
                       "--prove", "__main__", *flags])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1, err
  assert "--prove __main__ proves a --global rewrite in one process" in err
  assert not (tmp_path / "out.py").exists()
