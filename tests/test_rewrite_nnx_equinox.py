"""`compare.rewrite` ports flax NNX's `nnx.pmap` and equinox's `filter_pmap`.

Each input (an NNX program with a model and an `nnx.Optimizer` broadcast,
an equinox one with the model and optax's state broadcast, each as its
library's docs write it) is rewritten in both steps, then the original and
both rewrites run in one subprocess on 8 emulated devices: every printed
number the same string. What the rewrite cannot port (`nnx.StateAxes`,
`split_rngs`, static arguments) is left as written with a finding naming
its line, and `--global` falls back to the first step where a step's
layout is out of view.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from compare import rewrite
from compare._src.rewrite import pipeline
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject

ROOT = pathlib.Path(__file__).resolve().parents[1]
INPUTS = ROOT / "tests" / "rewrite_inputs"
# Runs each script as `__main__` in one process (jax imported once) and
# prints each one's stdout after a marker line.
_RUN_ALL = """
import contextlib, io, runpy, sys
for path in sys.argv[1:]:
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    runpy.run_path(path, run_name="__main__")
  print("=== " + path)
  print(out.getvalue(), end="")
"""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _outputs(*scripts) -> list[list[str]]:
  """Every number each script prints, as printed (8 CPU devices)."""
  env = {**os.environ, "XLA_FLAGS":
         "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, "-c", _RUN_ALL, *map(str, scripts)],
                        cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  parts = done.stdout.split("=== ")[1:]
  assert len(parts) == len(scripts), done.stdout
  return [_NUMBER.findall(part.split("\n", 1)[1]) for part in parts]


_WRITES = {
    "nnx_pmap_train.py": "@nnx.jit\n@nnx.shard_map(mesh=mesh",
    "equinox_pmap_train.py": "@eqx.filter_jit\n@functools.partial("
                             "filter_shard_map, mesh=mesh",
}


def _both_steps(source, tmp_path, capsys):
  """The first step's file and both steps' (each rewritten with exit 0)."""
  first = tmp_path / f"first_{source.name}"
  both = tmp_path / f"both_{source.name}"
  assert rewrite.main([str(source), "-o", str(first)]) == 0
  report = capsys.readouterr().out
  assert "1 pmap(s) rewritten," in report and "changed:" in report
  assert rewrite.main([str(source), "-o", str(both), "--global"]) == 0
  assert "1 call site(s) moved to global arrays" in capsys.readouterr().out
  for text in (first.read_text(), both.read_text()):
    assert _WRITES[source.name] in text and "_pmap_" not in text
    assert "nnx.pmap(" not in text and "filter_pmap(" not in text
  assert "a[0]" in first.read_text() and "a[0]" not in both.read_text()
  assert "make_array_from_process_local_data" in both.read_text()
  return first, both


def test_each_program_prints_the_same_numbers_after_both_steps(tmp_path,
                                                              capsys):
  # Both programs and their rewrites in one process: jax imported once.
  scripts = []
  for name in _WRITES:
    scripts += [INPUTS / name, *_both_steps(INPUTS / name, tmp_path, capsys)]
  # The guide's before/after is what the rewrite writes.
  guide = (ROOT / "docs" / "REWRITE.md").read_text()
  after = guide.split("becomes (the mesh after the imports;", 1)[1].split(
      "```text\n", 1)[1].split("```", 1)[0]
  assert after in (tmp_path / "first_nnx_pmap_train.py").read_text()
  outputs = _outputs(*scripts)
  for k, name in enumerate(_WRITES):
    original, ported, global_ = outputs[3 * k:3 * k + 3]
    assert len(original) == 6, name  # three steps: each its index and loss
    assert ported == original, name
    assert global_ == original, name


def _findings(text, global_step=False):
  write = (pipeline.rewrite_global_source if global_step
           else pipeline.rewrite_source)
  return write(text, "prog.py")


_HEAD = "import jax\nfrom flax import nnx\n\n\n"


@pytest.mark.parametrize("decorator,line,says", [
    ("@nnx.pmap(in_axes=(nnx.StateAxes({...: None}), 0))", 5,
     "in_axes holds nnx.StateAxes (line 5)"),
    ("@nnx.split_rngs(splits=8)\n@nnx.pmap(axis_name='i')", 6,
     "nnx.split_rngs (line 5) gives each device its own key"),
    ("@nnx.pmap(axis_name='i', static_broadcasted_argnums=(1,))", 5,
     "static arguments (static_broadcasted_argnums, line 5)"),
    ("@nnx.pmap(in_axes=(None, 1))", 5, "only axes None and 0"),
    ("@nnx.pmap(axis_name=AXIS)", 5, "axis_name (line 5) is not a string"),
    ("@nnx.pmap(in_axes=(None, 0, 0))", 5, "in_axes has 3 axes, f 2"),
])
def test_what_is_not_ported_is_left_with_its_line(decorator, line, says):
  text = _HEAD + decorator + "\ndef f(m, x):\n  return m(x)\n"
  result = _findings(text)
  assert result.code == text  # left as written
  assert [(f.line, f.kind) for f in result.findings] == [(line, Kind.PERSON)]
  assert says in result.findings[0].text


def test_a_called_pmap_gets_a_lambda_with_pmaps_view():
  text = (_HEAD + "def f(m, x):\n  return m(x)\n\n\n"
          "step = nnx.pmap(f, axis_name='i', in_axes=(None, 0), "
          "out_axes=None, donate_argnums=(0,))\n")
  result = _findings(text)
  flat = " ".join(result.code.split()).replace("( ", "(")
  assert ("step = nnx.jit(nnx.shard_map(lambda a0, a1: f(a0, "
          "jax.tree.map(lambda a: a[0], a1)),") in flat
  assert 'in_specs=(jax.P(), jax.P("i"))' in result.code
  assert "donate_argnums=(0,))" in result.code
  assert [(f.kind, f.subject) for f in result.findings] == [
      (Kind.CHANGED, Subject.PMAP)]


def test_an_output_mapped_per_device_is_stacked_again():
  text = _HEAD + "@nnx.pmap\ndef f(x):\n  return x * 2\n"
  code = _findings(text).code
  assert "x = jax.tree.map(lambda a: a[0], x)" in code
  assert "return jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0), " \
      "x * 2)" in code
  assert 'out_specs=jax.P("devices")' in code


@pytest.mark.parametrize("tail,lines,says", [
    ("y = f(m, x)\n", [5], "out_axes 0"),
    ("g = f\n", [5, 8], "is never called in this file"),
    ("y = f(m, x=x)\n", [8], "called with keyword"),
])
def test_global_falls_back_to_the_first_step_where_it_cannot_read(
    tail, lines, says):
  out_axes = "0" if "out_axes" in says else "None"
  text = (_HEAD + f"@nnx.pmap(axis_name='i', in_axes=(None, 0), "
          f"out_axes={out_axes})\ndef f(m, x):\n  return m(x)\n" + tail)
  result = _findings(text, global_step=True)
  assert result.code == _findings(text).code  # the first step
  blocked = [f for f in result.findings if f.subject == Subject.NOT_GLOBAL]
  assert [(f.line, f.kind) for f in blocked] == [
      (line, Kind.PERSON) for line in lines]
  assert says in blocked[0].text


_STACKED_MODEL = '''import functools

import equinox as eqx
import jax


def step(model, x, scale):
  return jax.lax.pmean(jax.vmap(model)(x) * scale, "d"), model


p_step = eqx.filter_pmap(functools.partial(step, scale=2.0), axis_name="d")
'''


def test_a_stacked_equinox_model_through_a_partial_computes_pmaps_result():
  # As equinox's BERT example pmaps: every argument mapped (the model
  # stacked per device, its activations functions), a functools.partial.
  import equinox as eqx  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import numpy as np  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  result = _findings(_STACKED_MODEL)
  assert "lambda a0, a1:" in result.code and "eqx.is_array(a)" in result.code
  assert [f.kind for f in result.findings] == [Kind.CHANGED]
  model = eqx.nn.MLP(2, 1, 4, 1, key=jax.random.key(0))
  stacked = jax.tree.map(lambda a: np.stack([a] * 8) if eqx.is_array(a)
                         else a, model)
  x = np.arange(48, dtype=np.float32).reshape(8, 3, 2) / 48
  outs = []
  for code in (_STACKED_MODEL, result.code):
    names = {}
    exec(compile(code, "prog.py", "exec"), names)  # pylint: disable=exec-used
    outs.append(names["p_step"](stacked, x))
  (loss, back), (port_loss, port_back) = outs
  np.testing.assert_array_equal(np.asarray(port_loss), np.asarray(loss))
  assert port_back.activation is model.activation  # held out, put back
  for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(port_back)):
    if eqx.is_array(a):
      np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
  # The example replicates with jax.device_put_replicated (removed in jax
  # 0.10): the same stacked copies, the activations as they are.
  put = _findings(_STACKED_MODEL + "\n\ndef replicated(model):\n  return "
                  "jax.device_put_replicated(model, jax.local_devices())\n")
  assert [f.subject for f in put.findings] == [Subject.PMAP,
                                               Subject.REMOVED_CALL]
  names = {}
  exec(compile(put.code, "prog.py", "exec"), names)  # pylint: disable=exec-used
  copies = names["replicated"](model)
  assert copies.activation is model.activation
  for a, b in zip(jax.tree.leaves(stacked), jax.tree.leaves(copies)):
    if eqx.is_array(a):
      np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_a_call_with_keyword_arguments_is_named_in_the_first_step():
  # The port's specs are positional: such a call fails.
  text = (_HEAD + "@nnx.pmap(axis_name='i', in_axes=(None, 0), "
          "out_axes=None)\ndef f(m, x):\n  return m(x)\n\n\n"
          "y = f(m, x=x)\n")
  result = _findings(text)
  assert [(f.line, f.kind) for f in result.findings] == [
      (5, Kind.CHANGED), (10, Kind.PERSON)]
  assert "pass them by position" in result.findings[1].text


def test_a_program_that_joins_jax_distributed_is_left_with_the_line():
  # The port's mesh is built at import: before the program's join.
  text = (_HEAD + "jax.distributed.initialize()\n\n\n@nnx.pmap(axis_name="
          "'i', in_axes=(None, 0), out_axes=None)\ndef f(m, x):\n"
          "  return m(x)\n")
  for global_step in (False, True):
    result = _findings(text, global_step)
    assert result.code == text
    assert [(f.line, f.kind) for f in result.findings] == [(5, Kind.PERSON)]
    assert "joins jax.distributed" in result.findings[0].text


@pytest.mark.parametrize("name, hint", [
    ("nnx_pmap_train", "compare.prove a compare.Port"),
    ("equinox_pmap_train", "compare.prove a compare.Port"),
    # The control: jax.pmap's port is proved by --prove.
    ("tutorial_linear_regression", "to prove it: --prove PKG.MODULE:NAME"),
])
def test_the_report_says_how_what_it_wrote_is_proved(name, hint, tmp_path,
                                                     capsys):
  rewrite.main([str(INPUTS / f"{name}.py"), "-o", str(tmp_path / "out.py")])
  said = [line for line in capsys.readouterr().out.splitlines()
          if line.startswith("to prove it:")]
  assert len(said) == 1 and hint in said[0], said
