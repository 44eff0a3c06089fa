"""`--prove` can fail: a rewrite planted with a wrong spec fails at step 1
(the negative control of tests/test_rewrite.py's proof)."""

import pathlib

from compare import rewrite
from compare._src.measure import hlo
from compare._src.prove import port as port_module
from compare._src.rewrite.proof import on_port_layout
from compare._src.rewrite.proof import rewrite_proof

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


def test_the_written_module_may_define_the_originals_absl_flags_again(
    tmp_path, monkeypatch):
  """A Port that imports the original (flax nlp_seq's `import train`) has
  run its absl flag definitions; the proof's import of the written file
  runs them again, and absl takes that as a re-import only under the same
  module name (else DuplicateFlagError, a crash where a verdict was due)."""
  import importlib  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  program = "from absl import flags\nflags.DEFINE_integer('sp_steps_57', 3, '')\n"
  (tmp_path / "sp_train.py").write_text(program)
  (tmp_path / "sp_train_port.py").write_text(program + "STEPS = 4\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  try:
    original = importlib.import_module("sp_train")  # as the Port does
    module = rewrite_proof._rewritten_module(  # pylint: disable=protected-access
        tmp_path / "sp_train_port.py", tmp_path / "sp_train.py")
    assert module.STEPS == 4
    assert __import__("sys").modules["sp_train"] is original  # put back
  finally:
    flags.FLAGS.__delattr__("sp_steps_57")
    monkeypatch.delitem(__import__("sys").modules, "sp_train",
                        raising=False)


def test_a_global_proof_counts_the_written_steps_collectives_not_the_adapters():
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import numpy as np  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  mesh = jax.make_mesh((8,), ("i",),
                       axis_types=(jax.sharding.AxisType.Auto,))

  def body(state, batch):
    # One all-reduce; the loss is each device's own (out_axes 0), which
    # the adapter averages as the harness averages pmap's.
    return state + jax.lax.pmean(batch.sum(), "i"), batch.sum()[None]

  written = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("i")),
                                  out_specs=(P(), P("i"))))
  step = on_port_layout.on_global_mesh(
      written, {"in_axes": (None, None), "out_axes": (None, 0)}, 8)
  state, batch = np.float32(0), np.ones(16, np.float32)

  def moved(lowered):
    """All-reduces and their bytes, as the proof's table counts them."""
    described = hlo.describe(lowered.compile())
    return (described["collectives_per_step_executed"]["all-reduce"],
            described["collective_bytes_per_step"]["all-reduce"])

  [counted] = step.lower_each(state, batch)
  assert moved(counted) == moved(written.lower(state, batch)) == (1, 4)
  # The adapter as it runs averages the loss too: XLA joins it to the
  # step's all-reduce, 4 bytes more (on flax lm1b, 3 all-reduces more).
  assert moved(jax.jit(step).lower(state, batch)) == (1, 8)
  # Each device sums its 2 rows: the state moves by their mean, 2.
  assert [float(x) for x in step(state, batch)] == [2.0, 2.0]
