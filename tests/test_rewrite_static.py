"""Static arguments through `python -m compare.rewrite`, and the reading's
messages on the issue's program (issue 74).

tests/rewrite_inputs/static_dropout_train.py is the 55-line step the issue
describes: `static_broadcasted_argnums=(3, 4)` (a train flag, a dropout
rate), `donate_argnums=(0,)`, a dropout key per device rebound in the step
and read by its nested loss function, an evaluation call whose metrics are
read and a training call whose metrics are not (`_`). Main's reader refused
it with two false messages (a parameter and its rebinding as two layouts;
an output "read" at the lines that bind it); both steps now print its
numbers, the second with no helper.
"""

import ast
import os
import pathlib
import subprocess
import sys
import types

import jax
import libcst
import numpy as np
import pytest

from compare import rewrite
from compare._src.rewrite import pipeline
from compare._src.rewrite.write import global_static
from tests import test_rewrite_global  # pylint: disable=g-bad-import-order
from tests.test_rewrite_global import assert_idiomatic  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
PROGRAM = INPUTS / "static_dropout_train.py"
# Each file run in one process, its stdout printed as one repr per file.
_RUNNER = ("import contextlib, io, runpy, sys\n"
           "for path in sys.argv[1:]:\n"
           "  out = io.StringIO()\n"
           "  with contextlib.redirect_stdout(out):\n"
           "    runpy.run_path(path, run_name='__main__')\n"
           "  print(repr(out.getvalue()))\n")


def _outputs(*paths):
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
  done = subprocess.run([sys.executable, "-c", _RUNNER, *map(str, paths)],
                        env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  return [ast.literal_eval(line) for line in done.stdout.splitlines()]


def test_both_steps_print_the_originals_numbers(tmp_path, capsys):
  first, both = tmp_path / "first.py", tmp_path / "both.py"
  # test_rewrite_global's decorated step with a static flag and a loss
  # read per device, run here too (one process for all: a start each
  # costs seconds of CI).
  flag, flag_global = tmp_path / "flag.py", tmp_path / "flag_global.py"
  flag.write_text(test_rewrite_global.STATIC)
  assert rewrite.main([str(flag), "-o", str(flag_global), "--global"]) == 0
  assert rewrite.main([str(PROGRAM), "-o", str(first)]) == 0
  assert rewrite.main([str(PROGRAM), "-o", str(both), "--global"]) == 0
  out = capsys.readouterr().out
  assert "0 place(s) need a person" in out, out
  assert ("static_broadcasted_argnums (3, 4) as jit's static_argnums, "
          "closed over by the function shard_map maps") in out
  text = both.read_text()
  # No `_pmap_` name, no wait; 12 lines more: the mesh (4), the placements
  # (3: the written calls are longer), pmap's view of the key per device
  # (1), and the step (4: jit's decorator, shard_map's 3, the body's def
  # and its call, for pmap's 2).
  assert_idiomatic(PROGRAM, both, lines=12)
  assert ("@functools.partial(jax.jit, static_argnums=(3, 4), "
          "donate_argnums=(0,))") in text
  want, *got, flags, flags_global = _outputs(PROGRAM, first, both, flag,
                                             flag_global)
  assert want.count("\n") == 6, want  # 5 losses and the parameters' sum
  assert got == [want, want]
  assert flags.count("\n") == 5, flags
  assert flags_global == flags


# pmap counts static positions in donate_argnums; jit too, over the same
# signature: a static argument before the donated one keeps its number.
DONATED = '''
import jax
import jax.numpy as jnp
from flax import jax_utils
from flax.training import common_utils


def step(scale, w, batch, squared):
  g = jax.lax.pmean(jnp.mean(batch) * scale, "i")
  return w - (g ** 2 if squared else g)


p_step = jax.pmap(step, axis_name="i", static_broadcasted_argnums=(0, 3),
                  donate_argnums=(1,))


def run(w, batches):
  w = jax_utils.replicate(w)
  for i, rows in enumerate(batches):
    batch = common_utils.shard(rows)
    w = p_step(2.0, w, batch, i % 2 == 0)
  return jax_utils.unreplicate(w)
'''


def test_a_donated_argument_after_static_ones_is_donated():
  written = pipeline.rewrite_global_source(DONATED).code
  assert "static_argnums=(0, 3), donate_argnums=(1,))" in written
  assert "lambda w, batch: step(scale, w, batch, squared)" in written
  original, port = {}, {}
  exec(compile(DONATED, "original", "exec"), original)  # pylint: disable=exec-used
  exec(compile(written, "written", "exec"), port)  # pylint: disable=exec-used
  batches = [np.arange(16, dtype=np.float32) + i for i in range(3)]
  w = np.ones(3, np.float32)
  assert np.array_equal(original["run"](w, batches), port["run"](w, batches))
  placed = jax.device_put(w, port["replicated"] if "replicated" in port
                          else jax.NamedSharding(port["mesh"], jax.P()))
  port["p_step"](2.0, placed, jax.device_put(batches[0], jax.NamedSharding(
      port["mesh"], jax.P("i"))), True)
  assert placed.is_deleted()  # donated: argument 1, as pmap's


def _people(source):
  return [f.text for f in pipeline.rewrite_global_source(source).findings
          if f.kind == "person"]


def test_a_parameter_rebound_before_a_nested_function_is_one_layout():
  # `rng = jax.random.fold_in(rng, ...)` at line 32, then `def loss_fn`
  # reads it: the closure runs after its def and sees the rebinding only.
  people = _people(PROGRAM.read_text())
  assert not people, people
  # A def before the rebinding may run before it or after: both bindings
  # are in play there, and the message names them.
  lines = PROGRAM.read_text().splitlines()
  at = lines.index("  rng = jax.random.fold_in(rng, state.step)")
  moved = lines[:at] + lines[at + 1:at + 5] + [lines[at]] + lines[at + 5:]
  people = _people("\n".join(moved) + "\n")
  assert ("rng holds values of different layouts here (bound at lines "
          "[31, 36])") in people[0], people


def test_an_outputs_layout_is_asked_where_it_is_read():
  # The training call's metrics read per device (line 54) and the
  # evaluation's as one value (line 52): named by the lines that read
  # them, not the lines (51, 53) that bind them.
  source = PROGRAM.read_text().replace(
      "  state, _ = train_step(state, batch, rngs, True, 0.1)\n",
      "  state, metrics = train_step(state, batch, rngs, True, 0.1)\n"
      "  print(metrics[\"loss\"][0])\n")
  assert _people(source) == [
      "global step not written: output 1 of train_step is read as one "
      "value at line 52 and per device at line 54 (docs/MIGRATION.md"
      "#idiom-map)"]


def test_the_lambdas_parameters_hide_no_name_the_mapped_function_reads():
  # `functools.partial(step, rate=rate)`: a lambda parameter named `rate`
  # would hand the step the traced argument, not the module's value.
  fn = libcst.parse_statement("def step(w, batch, rate):\n  pass\n")
  assert global_static.parameter_names(fn, 3, {"step", "w"}) == [
      "arg0", "arg1", "arg2"]
  assert global_static.parameter_names(fn, 3, {"step"}) == [
      "w", "batch", "rate"]
  assert global_static.parameter_names(None, 2, {"arg0"}) == [
      "_arg0", "_arg1"]
  assert global_static.read_names(
      "functools.partial(step, rate=rate)") == {
          "functools", "partial", "step", "rate"}


DECORATED = '''
@functools.partial(jax.pmap, axis_name="i", static_broadcasted_argnums=(1,))
def step(w, train, batch):
  """Docs."""
  return w + batch
'''
PARTS = ["mesh=mesh", "in_specs=(P(), P('i'))", "out_specs=P()"]


def _written(source, static=(1,), donate="(0,)", width=79):
  fn = libcst.parse_statement(source.lstrip("\n"))
  out = global_static.step_function(fn, static, PARTS, donate, width)
  return None if out is None else libcst.Module([out]).code


def test_a_decorated_static_step_is_jit_over_its_shard_map_body():
  # A unit of the decorated step (the programs' tests write it in full):
  # the docstring stays outside, the body is the mapped parameters' alone.
  assert _written(DECORATED) == (
      "@functools.partial(jax.jit, static_argnums=(1,), "
      "donate_argnums=(0,))\n"
      "def step(w, train, batch):\n"
      '    """Docs."""\n'
      "    @functools.partial(jax.shard_map, mesh=mesh, "
      "in_specs=(P(), P('i')),\n"
      "        out_specs=P())\n"
      "    def step(w, batch):\n"
      "        return w + batch\n"
      "    return step(w, batch)\n")
  # No docstring: the first statement is the body's; no donation, a
  # narrow width: jit's and shard_map's keywords one a line.
  assert _written(DECORATED.replace('  """Docs."""\n', ""), donate=None,
                  width=40) == (
      "@functools.partial(jax.jit,\n"
      "    static_argnums=(1,))\n"
      "def step(w, train, batch):\n"
      "    @functools.partial(jax.shard_map,\n"
      "        mesh=mesh,\n"
      "        in_specs=(P(), P('i')),\n"
      "        out_specs=P())\n"
      "    def step(w, batch):\n"
      "        return w + batch\n"
      "    return step(w, batch)\n")


@pytest.mark.parametrize("signature, static", [
    ("w, *rest", (0,)), ("w, *, train", (0,)), ("w, **kw", (0,)),
    ("w, train", (2,))])
def test_a_static_step_its_parameters_cannot_say_is_not_written(
    signature, static):
  assert _written(f"def step({signature}):\n  return w\n", static) is None
  # The last position its parameters name is written.
  assert _written("def step(w, train):\n  return w\n", (1,)) is not None


def test_an_assigned_static_step_calls_its_function_as_pmap_did():
  # functools.partial(f, k=v): f called with the keywords after the
  # parameters; a lambda in parentheses, its arguments wrapped at 12.
  spec = ["mesh=mesh", 'in_specs=(P(), P("i"))', "out_specs=P()"]
  assert global_static.step_expression(
      libcst.parse_expression("functools.partial(step, rate=rate)"),
      ["w", "train", "batch"], (1,), spec, "(0,)") == (
          "jax.jit(\n"
          "    lambda w, train, batch: jax.shard_map(\n"
          "        lambda w, batch: step(w, train, batch, rate=rate),\n"
          '        mesh=mesh, in_specs=(P(), P("i")), out_specs=P())'
          "(w, batch),\n"
          "    static_argnums=(1,), donate_argnums=(0,))")
  assert global_static.step_expression(
      libcst.parse_expression("lambda w, t, b: w"),
      ["weights", "training", "batches"], (1,), spec, "(0,)", width=36) == (
          "jax.jit(\n"
          "    lambda weights, training, batches: jax.shard_map(\n"
          "        lambda weights, batches: (lambda w, t, b: w)(\n"
          "            weights, training,\n"
          "            batches),\n"
          "        mesh=mesh,\n"
          '        in_specs=(P(), P("i")),\n'
          "        out_specs=P())(weights, batches),\n"
          "    static_argnums=(1,),\n"
          "    donate_argnums=(0,))")


def test_a_static_position_past_the_calls_arguments_has_no_count():
  step = types.SimpleNamespace(args=["w", "batch"], static=(2,))
  assert global_static.count(step) == 3
  assert global_static.count(types.SimpleNamespace(
      args=["w", "batch"], static=(3,))) is None
  assert global_static.count(types.SimpleNamespace(args=[],
                                                   static=(0,))) is None


def test_a_partial_by_its_bare_name_is_called_with_its_keywords():
  # pylint: disable=protected-access
  # `from functools import partial`: as `functools.partial`, the function
  # called with the parameters, then the keywords.
  assert global_static._call(
      libcst.parse_expression("partial(step, rate=rate)"), ["w", "b"]) == (
          "step", ["w", "b", "rate=rate"])
  # A partial binding a positional argument too is called whole.
  assert global_static._call(
      libcst.parse_expression("functools.partial(step, w0, rate=r)"),
      ["w", "b"]) == ("functools.partial(step, w0, rate=r)", ["w", "b"])


def test_packed_parts_fill_a_line_to_its_width_inclusive():
  # pylint: disable=protected-access
  # "abcc, dd)" is 9 characters: on one line at width 9, wrapped at 8.
  assert global_static._packed("ab", ["cc", "dd"], "  ", 9, ")") == [
      "abcc, dd)"]
  assert global_static._packed("ab", ["cc", "dd"], "  ", 8, ")") == [
      "abcc,", "  dd)"]
