"""`python -m compare.rewrite --global`: the second step, to global arrays.

Each script of tests/rewrite_inputs that the step can take holds no
`replicate`, `shard`, `unreplicate`, `prefetch_to_device` or `[0]` of a
replicated value afterwards and prints the original's numbers;
`--global --prove` proves the written step, and a wrong spec written there
fails. What it cannot take: tests/test_rewrite_global_places.py; values
read beyond the step: tests/test_rewrite_global_reads.py.
"""

import pathlib
import re

import pytest

from compare import rewrite
from compare._src.prove import port as port_module
from compare._src.rewrite import rewrite_helpers
from compare._src.rewrite.proof import rewrite_proof
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
# What the second step removes. An `x[0]` may stay: of an output kept per
# device (pmap's stacked layout: `loss[0]` reads device 0's as before); of
# a replicated value it is refused (a device's copy, or a tuple's element).
STACKED = re.compile(r"\b(?:replicate|unreplicate|common_utils\.shard|"
                     r"prefetch_to_device)\(")


def assert_idiomatic(source, port, pmaps=1, lines=10):
  """The port a JAX engineer would write (issue 58): no helper of ours, no
  wait the program did not have, at most `lines` more per pmap."""
  before, after = source.read_text(), port.read_text()
  assert "_pmap_" not in after
  assert after.count("block_until_ready") <= before.count(
      "block_until_ready")
  assert "mesh = jax.sharding.Mesh(" in after
  assert len(after.splitlines()) - len(before.splitlines()) <= lines * pmaps


@pytest.mark.parametrize("script, changed_lines, plain", [
    # pmap, replicate, prefetch(map(shard)), two unreplicates.
    ("flax_style_train", [57, 68, 69, 74, 77], True),
    # pmap, the dead n_devices and split removed, the tree.map replicate,
    # two split calls, loss[0] of the loss the step pmeans (one value
    # now), tree.map x[0].
    ("tutorial_linear_regression", [43, 73, 74, 77, 81, 82, 90, 94], True),
    # pmap in main, the np.stack replicate (metrics["loss"][0] as before:
    # the loss is each device's own), the call's keyword argument passed
    # by position (the step a lambda naming it).
    ("local_pmap_train", [28, 33, 40], True)])
def test_a_script_holds_no_stacked_layout_and_prints_the_same(
    script, changed_lines, plain, tmp_path, capsys):
  source, port = INPUTS / f"{script}.py", tmp_path / f"{script}_global.py"
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  out = capsys.readouterr().out
  assert code == 0, out
  assert "0 place(s) need a person" in out
  # Every "changed" line is a line the rewrite changed, and the only ones.
  reported = sorted({int(line) for line in re.findall(
      rf"{re.escape(str(source))}:(\d+): changed", out)})
  assert reported == changed_lines
  # The helpers' own x[0] is pmap's stacked view, kept for values the
  # program reads per device; the program holds no stacked-layout call.
  program = rewrite_helpers.without_helpers(port.read_text())
  assert (program == port.read_text()) == plain
  if plain:
    assert_idiomatic(source, port)
  assert not STACKED.findall(program), STACKED.findall(program)
  assert _script_output(port) == _script_output(source)


def test_without_global_the_report_points_to_it(tmp_path, capsys):
  port = tmp_path / "port.py"
  assert rewrite.main([str(INPUTS / "flax_style_train.py"), "-o",
                       str(port)]) == 0
  assert "--global" in capsys.readouterr().out
  assert "jax_utils.replicate(" in port.read_text()


def _global(tmp_path, script="local_pmap_train"):
  target = tmp_path / f"{script}_global.py"
  assert rewrite.main([str(INPUTS / f"{script}.py"), "-o", str(target),
                       "--global"]) == 0
  return target


def test_global_prove_passes_and_a_wrong_spec_fails(tmp_path, capsys):
  target = _global(tmp_path)
  team_port = port_module.load("tests.rewrite_inputs.local_pmap_port:port")
  source = INPUTS / "local_pmap_train.py"
  assert rewrite_proof.prove(team_port, source, target, steps=3,
                             global_step=True) == 0
  out = capsys.readouterr().out
  assert "port vs pmap             bitwise at every check" in out
  # Both ports compiled on the Port's state: one all-reduce each (the
  # gradient and the loss, fused), no byte moved more.
  assert "what the global step moved, per device" in out
  assert re.search(r"all-reduce +1 moving 20 B +1 moving 20 B", out), out
  text = target.read_text()
  spec = 'in_specs=(jax.P(), jax.P("batch"), jax.P("batch"))'
  assert text.count(spec) == 1
  # The batch taken whole on every device: its view takes device 0's rows.
  target.write_text(text.replace(
      spec, 'in_specs=(jax.P(), jax.P(), jax.P("batch"))'))
  assert rewrite_proof.prove(team_port, source, target, steps=3,
                             global_step=True) == 1
  assert "verdict: fail, first at step 1" in capsys.readouterr().out


@pytest.mark.parametrize("script", ["flax_style_train",
                                    "tutorial_linear_regression"])
def test_the_first_steps_output_takes_the_second_step(script, tmp_path,
                                                      capsys):
  source = INPUTS / f"{script}.py"
  first, both = tmp_path / "first.py", tmp_path / "both.py"
  direct = tmp_path / "direct.py"
  assert rewrite.main([str(source), "-o", str(first)]) == 0
  assert rewrite.main([str(source), "-o", str(direct), "--global"]) == 0
  capsys.readouterr()
  assert rewrite.main([str(first), "-o", str(both), "--global"]) == 0
  out = capsys.readouterr().out
  assert both.read_text() == direct.read_text()  # one reading, both ways
  # (direct.py prints the original's numbers:
  # test_a_script_holds_no_stacked_layout_and_prints_the_same.)
  # The report's lines are the given file's: each changed line names a
  # line of first.py that holds what it says was changed.
  lines = first.read_text().splitlines()
  for number, text in re.findall(r"first\.py:(\d+): changed: (.+)", out):
    said = text.split()[0].split("(")[0].rstrip(".")
    if text.startswith("dead local removed: "):  # the name it bound
      said = text.split(": ")[1]
    held = lines[int(number) - 1]
    assert (said in held or (said == "pmap" and "_pmap_call" in held)
            or said == "[0]" and "[0]" in held), (number, text, held)


def test_the_first_step_refuses_its_own_output_with_a_hint(tmp_path,
                                                           capsys):
  first = tmp_path / "first.py"
  assert rewrite.main([str(INPUTS / "flax_style_train.py"), "-o",
                       str(first)]) == 0
  capsys.readouterr()
  assert rewrite.main([str(first), "-o", str(tmp_path / "again.py")]) == 2
  err = capsys.readouterr().err
  assert "first step's output: --global takes the second" in err
  assert not (tmp_path / "again.py").exists()


STATIC = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils
from flax.training import common_utils


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,),
                   static_broadcasted_argnums=(2,))
def train_step(w, batch, squared):
  def loss_fn(w):
    err = batch["x"] @ w - batch["y"]
    return jnp.mean(err ** 2) if squared else jnp.mean(jnp.abs(err))
  loss, grad = jax.value_and_grad(loss_fn)(w)
  grad, loss = jax.lax.pmean((grad, loss), "batch")
  return w - 0.1 * grad, loss


w = jax_utils.replicate(np.zeros(3, np.float32))
rng = np.random.default_rng(0)
for i in range(4):
  x = rng.normal(size=(64, 3)).astype(np.float32)
  batch = common_utils.shard({"x": x, "y": x @ np.float32([1, -2, 3])})
  w, loss = train_step(w, batch, i % 2 == 0)
  print(i, repr(float(loss[0])))
print(repr(float(jax_utils.unreplicate(w)[2])))
'''


def test_static_arguments_take_the_second_step(tmp_path, capsys):
  # pmap's static_broadcasted_argnums: the flag is no array, has no layout;
  # the mapped arguments around it are placed as anywhere else, the flag
  # closed over by the shard_map'd body jit builds per flag.
  source, port = tmp_path / "static.py", tmp_path / "static_g.py"
  source.write_text(STATIC)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "static_broadcasted_argnums (2,) as jit's static_argnums" in out
  program = rewrite_helpers.without_helpers(port.read_text())
  assert not STACKED.findall(program), STACKED.findall(program)
  # jit takes the flag (static_argnums); shard_map the arrays, no helper.
  assert "in_specs=(jax.P(), jax.P(\"batch\"))" in program
  assert "jax.jit, static_argnums=(2,), donate_argnums=(0,))" in program
  assert_idiomatic(source, port)
  # Its numbers: tests/test_rewrite_static.py runs both, in one process
  # with the static-argument program.


def test_an_axis_named_by_a_module_constant_takes_the_second_step(
    tmp_path, capsys):
  # Teams keep the axis in a constant beside their steps (`AXIS = "batch"`):
  # read as its string, the step is taken and prints the original's numbers.
  text = (INPUTS / "flax_style_train.py").read_text()
  text = text.replace('axis_name="batch"', "axis_name=AXIS").replace(
      "\nimport optax\n", '\nimport optax\n\nAXIS = "batch"\n', 1)
  assert text.count("axis_name=AXIS") == 3
  source, port = tmp_path / "team.py", tmp_path / "team_g.py"
  source.write_text(text)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  assert "0 place(s) need a person" in capsys.readouterr().out
  program = rewrite_helpers.without_helpers(port.read_text())
  assert not STACKED.findall(program), STACKED.findall(program)
  assert _script_output(port) == _script_output(source)
  # A name bound twice is no constant: refused, by line.
  source.write_text(text.replace(
      "p_train_step = jax.pmap(", "AXIS = 'other'\np_train_step = jax.pmap(",
      1))
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 1
  assert "axis_name is an expression" in capsys.readouterr().out


_FLAX_LOOP = """  it = jax_utils.prefetch_to_device(
      map(common_utils.shard, batches(steps)), 2)
  for step, batch in enumerate(it):"""
PREFETCHED = {
    # The prefetch inside the for statement: its batches are global too.
    "inline": """  for step, batch in enumerate(jax_utils.prefetch_to_device(
      map(common_utils.shard, batches(steps)), 2)):""",
    # flax imagenet's input: batches stacked by the program's own function
    # (`prepare_tf_data`), then prefetched.
    "stacked elsewhere": """  def prepare(xs):
    n = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((n, -1) + x.shape[1:]), xs)
  it = map(prepare, batches(steps))
  it = jax_utils.prefetch_to_device(it, 2)
  for step, batch in enumerate(it):""",
    "returned by a function": """  # flax imagenet's input, zip(), next()
  train_iter = create_input_iter(steps)
  eval_iter = create_input_iter(1)
  eval_batch = next(eval_iter)
  state, metrics = p_train_step(state, eval_batch)
  print("eval", float(jax_utils.unreplicate(metrics)["loss"]))
  for step, batch in zip(range(steps), train_iter):"""}
_INPUT_ITER = """

def create_input_iter(steps):
  def prepare(xs):
    n = jax.local_device_count()
    return jax.tree_util.tree_map(
        lambda x: x.reshape((n, -1) + x.shape[1:]), xs)
  it = map(prepare, batches(steps))
  it = jax_utils.prefetch_to_device(it, 2)
  return it

def main("""


@pytest.mark.parametrize("case", sorted(PREFETCHED))
def test_prefetched_batches_become_global_batches(case, tmp_path, capsys):
  text = (INPUTS / "flax_style_train.py").read_text()
  assert _FLAX_LOOP in text
  source, port = tmp_path / "team.py", tmp_path / "team_g.py"
  source.write_text(text.replace(_FLAX_LOOP, PREFETCHED[case]).replace(
      'batch["y"]).mean()', 'batch["y"]).sum() / batch["x"].shape[0]'
  ).replace("\n\ndef main(", _INPUT_ITER if "create_input_iter" in
            PREFETCHED[case] else "\n\ndef main(", 1).replace(
                "def main(steps=40)", "def main(steps=20)"))
  assert "shape[0]" in source.read_text()  # other rows, other numbers
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "0 place(s) need a person" in out and (
      "merged to [devices * b, ...]" in out) == (case != "inline"), out
  program = rewrite_helpers.without_helpers(port.read_text())
  assert not STACKED.findall(program), STACKED.findall(program)
  assert _script_output(port) == _script_output(source)
