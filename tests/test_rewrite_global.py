"""`python -m compare.rewrite --global`: the second step, to global arrays.

Each script of tests/rewrite_inputs that the step can take holds no
`replicate`, `shard`, `unreplicate`, `prefetch_to_device` or `[0]` of a
replicated value afterwards and prints the original's numbers; each
construct it cannot take is reported by line, exit 1, with the first step
written; `--global --prove` proves the written step, and a wrong spec
written there fails.
"""

import pathlib
import re

import pytest

from compare import rewrite
from compare._src import port as port_module
from compare._src import rewrite_helpers
from compare._src import rewrite_proof
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
# What the second step removes. An `x[0]` may stay: of an output kept per
# device (pmap's stacked layout: `loss[0]` reads device 0's as before); of
# a replicated value it is refused (a device's copy, or a tuple's element).
STACKED = re.compile(r"\b(?:replicate|unreplicate|common_utils\.shard|"
                     r"prefetch_to_device)\(")


@pytest.mark.parametrize("script, changed_lines", [
    # pmap, replicate, prefetch(map(shard)), two unreplicates.
    ("flax_style_train", [57, 68, 69, 74, 77]),
    # pmap, the tree.map replicate, two split calls, tree.map x[0] (its
    # loss[0] reads the loss kept per device, as before).
    ("tutorial_linear_regression", [43, 74, 81, 82, 94]),
    # pmap in main, the np.stack replicate (metrics["loss"][0] as before).
    ("local_pmap_train", [28, 33])])
def test_a_script_holds_no_stacked_layout_and_prints_the_same(
    script, changed_lines, tmp_path, capsys):
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
  assert program != port.read_text()
  assert not STACKED.findall(program), STACKED.findall(program)
  assert _script_output(port) == _script_output(source)


_STEP = '''
import jax
from flax import jax_utils
from flax.training import common_utils

def train_step(state, batch):
  return state, jax.lax.pmean(batch, "batch")

p_step = jax.pmap(train_step, axis_name="batch")
'''

BLOCKED = {
    "a parameter": ("def run(state, batch):\n"
                    "  return p_step(state, common_utils.shard(batch))\n",
                    "argument 0 of p_step, `state`: where it comes from is "
                    "not in view"),
    "two layouts": ("def run(state, batches, other):\n"
                    "  state = jax_utils.replicate(state)\n"
                    "  for batch in batches:\n"
                    "    state, m = p_step(state, common_utils.shard(batch))\n"
                    "    state = other\n",
                    "state holds values of different layouts"),
    "read per device": ("def run(state, batch):\n"
                        "  state = jax_utils.replicate(state)\n"
                        "  print(state.shape)\n"
                        "  return p_step(state, common_utils.shard(batch))\n",
                        "state is placed once on the mesh now"),
    "batch shape read": ("def run(s, batch):\n"
                         "  s = jax_utils.replicate(s)\n"
                         "  batch = common_utils.shard(batch)\n"
                         "  n = batch.shape[1]\n"
                         "  return p_step(s, batch)\n",
                         "batch is a global batch now"),
    "a value": ("steps = [p_step]\n", "p_step, a pmapped step, used as a "
                "value"),
    "star arguments": ("def run(args):\n  return p_step(*args)\n",
                       "p_step called with */** arguments"),
    "keyword": ("def run(s, b):\n  s = jax_utils.replicate(s)\n"
                "  return p_step(batch=common_utils.shard(b), state=s)\n",
                "keyword argument batch of p_step is global batch"),
    "prefetch by keyword": ("def run(s, it):\n"
                            "  s = jax_utils.replicate(s)\n"
                            "  for b in jax_utils.prefetch_to_device("
                            "iterator=it, size=2):\n"
                            "    s, m = p_step(s, b)\n",
                            "prefetch_to_device's batches given by keyword"),
    "never called": ("", "p_step is never called in this file"),
    "returned, not bound": ("def batches_of(it):\n"
                            "  it = jax_utils.prefetch_to_device(it, 2)\n"
                            "  return it\n"
                            "def run(s, it):\n"
                            "  s = jax_utils.replicate(s)\n"
                            "  for b in batches_of(it):\n"
                            "    s, m = p_step(s, b)\n",
                            "batches_of returns global batches"),
    "a replicated value returned, not bound": (
        "def create(s):\n"
        "  s = jax_utils.replicate(s)\n"
        "  return s\n"
        "def run(s, b):\n"
        "  return p_step(create(s), common_utils.shard(b))\n",
        "create returns a replicated value"),
    "a function returning a replicated value, as a value": (
        "def create(s):\n"
        "  s = jax_utils.replicate(s)\n"
        "  return s\n"
        "def run(seeds, b):\n"
        "  for s in map(create, seeds):\n"
        "    s, m = p_step(s, common_utils.shard(b))\n",
        "and is used here as a value: call it as `x = create(...)`"),
    "two pmaps of one name": (
        "def evaluate(s, b):\n"
        "  p_step = jax.pmap(train_step, 'batch', in_axes=(None, 0))\n"
        "  return p_step(s, common_utils.shard(b))\n"
        "def run(s, b):\n"
        "  s = jax_utils.replicate(s)\n"
        "  s, m = p_step(s, common_utils.shard(b))\n",
        "two pmaps bound to the name p_step"),
    "returned replicated on one path only": (
        "def create(s, again):\n"
        "  r = jax_utils.replicate(s)\n"
        "  if again:\n"
        "    return r\n"
        "  return s\n"
        "def run(s, b):\n"
        "  s = create(s, True)\n"
        "  b = common_utils.shard(b)\n"
        "  s, m = p_step(s, b)\n",
        "r is placed once on the mesh now"),
    # Fed back to the step in a loop, it would read as replicated; but the
    # loop's first pass takes the caller's value (here stacked by hand).
    "a loop's state from a parameter": (
        "def run(s, bs):\n"
        "  for b in bs:\n"
        "    s, m = p_step(s, common_utils.shard(b))\n"
        "  return m\n"
        "run(np.stack([np.zeros(3)] * 8), [np.ones((16, 3))])\n",
        "argument 0 of p_step, `s`: where it comes from is not in view"),
    # pmap gave each device the whole stacked array: the global placement
    # would give it another value.
    "a global batch broadcast": (
        "p_whole = jax.pmap(train_step, 'batch', in_axes=(0, None))\n"
        "s = jax_utils.replicate(s0)\n"
        "s, m = p_step(s, common_utils.shard(b0))\n"
        "s, m = p_whole(s, common_utils.shard(b0))\n",
        "argument 1 of p_whole is global batch (made by a shard"),
    "a replicated value broadcast": (
        "p_whole = jax.pmap(train_step, 'batch', in_axes=(None, 0))\n"
        "s = jax_utils.replicate(s0)\n"
        "s, m = p_step(s, common_utils.shard(b0))\n"
        "s, m = p_whole(s, common_utils.shard(b0))\n",
        "argument 0 of p_whole is replicated (made by a replicate"),
    "[0] of a replicated value": (
        "s = jax_utils.replicate(s0)\n"
        "out, m = p_step(s, common_utils.shard(b0))\n"
        "print(s[0])\n",
        "s[0] of a replicated value: device 0's copy where s is an array"),
    # The placement is written; where its value goes is not followed.
    "inside a comprehension": ("def run(s, bs):\n"
                               "  s = jax_utils.replicate(s)\n"
                               "  for b in (common_utils.shard(x) "
                               "for x in bs):\n"
                               "    s, m = p_step(s, b)\n",
                               "goes where its layout cannot be followed"),
    "read both ways": ("def run(s, b, log):\n"
                       "  s = jax_utils.replicate(s)\n"
                       "  b = common_utils.shard(b)\n"
                       "  s, m = p_step(s, b)\n"
                       "  print(jax_utils.unreplicate(m))\n"
                       "  s, m = p_step(s, b)\n  log.append(m)\n",
                       "output 1 of p_step is read as one value at line"),
    "two axes": ("q_step = jax.pmap(train_step, axis_name='other')\n"
                 "def run(s, b):\n  s = jax_utils.replicate(s)\n"
                 "  b = common_utils.shard(b)\n"
                 "  return p_step(s, b), q_step(s, b)\n",
                 "the pmaps name 2 axes"),
}


@pytest.mark.parametrize("case", sorted(BLOCKED))
def test_each_construct_it_cannot_take_is_reported_by_line(case, tmp_path,
                                                          capsys):
  body, why = BLOCKED[case]
  source = tmp_path / "team.py"
  source.write_text(_STEP + body)
  port = tmp_path / "team_global.py"
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 1
  out = capsys.readouterr().out
  lines = [line for line in out.splitlines() if why in line]
  assert lines, out
  assert all(re.search(r"team\.py:\d+: NEEDS A PERSON: global step not "
                       "written", line) for line in lines), lines
  # The first step is written instead: pmap's layout at every call site.
  assert "jax.shard_map(" in port.read_text()
  assert "jax.device_put(" not in port.read_text()


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
  # The state read as a global batch: each device takes its rows of the
  # parameters, a shape the body cannot use, or the wrong numbers.
  text = target.read_text()
  spec = 'in_specs=((jax.P(), jax.P("batch")), jax.P("batch"))'
  assert text.count(spec) == 1
  target.write_text(text.replace(spec, spec.replace(
      "(jax.P(), jax.P(\"batch\"))", "(jax.P(), jax.P())")))
  assert rewrite_proof.prove(team_port, source, target, steps=3,
                             global_step=True) == 1
  assert "verdict: fail, first at step 1" in capsys.readouterr().out


PER_DEVICE = '''
import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils
from flax.training import common_utils


def train_step(w, batch):
  loss = jnp.mean((batch["x"] @ w - batch["y"]) ** 2)
  grad = jax.lax.pmean(jax.grad(
      lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2))(w), "batch")
  return w - 0.1 * grad, loss  # the loss per device: not averaged


p_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))


def main():
  w = jax_utils.replicate(np.zeros(3, np.float32))
  rng = np.random.default_rng(0)
  losses = []
  for _ in range(3):
    x = rng.normal(size=(64, 3)).astype(np.float32)
    batch = common_utils.shard({"x": x, "y": x @ np.float32([1, -2, 3])})
    w, loss = p_step(w, batch)
    losses.append(loss)
    print(repr(float(jax_utils.unreplicate(loss))))
  print(np.asarray(losses).round(6).tolist())
  print(repr(float(jax_utils.unreplicate(w)[1])))


main()
'''


RETURNED = PER_DEVICE.replace(
    "def main():\n  w = jax_utils.replicate(np.zeros(3, np.float32))\n",
    "def create_state():\n  w = np.zeros(3, np.float32)\n"
    "  w = jax_utils.replicate(w)\n  return w\n\n\n"
    "def main():\n  w = create_state()\n")


def test_a_replicated_value_returned_by_name_is_followed(tmp_path, capsys):
  # Flax's cifar10 example made its optimizer so (`optimizer =
  # jax_utils.replicate(optimizer); return optimizer`).
  assert RETURNED != PER_DEVICE
  source, port = tmp_path / "returned.py", tmp_path / "returned_g.py"
  source.write_text(RETURNED)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "0 place(s) need a person" in out
  text = port.read_text()
  assert "jax_utils.replicate" not in text
  assert "jax_utils.unreplicate(w)" not in text
  assert _script_output(port) == _script_output(source)


TUPLE_STATE = '''
import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils
from flax.training import common_utils


def step(state, batch):
  w, count = state
  grad = jax.lax.pmean(jnp.mean(batch @ w) * w, "i")
  return (w - 0.1 * grad, count + 1), jax.lax.pmean(jnp.mean(batch), "i")


p_step = jax.pmap(step, "i")

state = jax_utils.replicate((np.arange(3.0, dtype=np.float32), np.int32(0)))
for i in range(3):
  x = np.arange(48.0 * i, 48.0 * (i + 1)).reshape(16, 3) / 100
  state, loss = p_step(state, common_utils.shard(x))
w = state[0]  # the tuple's first element, not device 0's copy
print(jax_utils.unreplicate(w).tolist(), repr(float(loss[0])))
'''


def test_index_0_of_a_replicated_value_is_refused(tmp_path, capsys):
  # `state[0]` of a replicated (w, count) tuple is w, every device's copy;
  # of a replicated array it would be device 0's copy. Only running it
  # tells: refused by line (it was rewritten to `state`, the tuple: a
  # wrong port, 0 places).
  source, port = tmp_path / "tuple_state.py", tmp_path / "tuple_state_g.py"
  source.write_text(TUPLE_STATE)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 1
  out = capsys.readouterr().out
  # Read by [0], the step's state output is not one copy: it meets the
  # replicated state at the step.
  assert re.search(r"tuple_state\.py:20: NEEDS A PERSON: global step not "
                   r"written: state holds values of different layouts", out)
  assert "jax.device_put(" not in port.read_text()


TUPLE_METRICS = TUPLE_STATE.replace(
    "w = state[0]  # the tuple's first element, not device 0's copy\n"
    "print(jax_utils.unreplicate(w).tolist(), repr(float(loss[0])))\n",
    "  print(np.asarray(metrics[0]).tolist())\n"
    "print(jax_utils.unreplicate(state)[0].tolist())\n").replace(
        "state, loss = p_step", "state, metrics = p_step").replace(
            "jax.lax.pmean(jnp.mean(batch), \"i\")",
            "(jnp.mean(batch), jax.lax.pmean(jnp.mean(batch), \"i\"))")


def test_index_0_of_an_output_keeps_it_per_device(tmp_path, capsys):
  # `metrics[0]` of a step's (local, averaged) output is the local loss of
  # every device: kept stacked, it reads as before (read as one copy, P(),
  # it printed one device's: a wrong port, 0 places).
  assert TUPLE_METRICS != TUPLE_STATE
  source, port = tmp_path / "tuple_out.py", tmp_path / "tuple_out_g.py"
  source.write_text(TUPLE_METRICS)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  assert "0 place(s) need a person" in capsys.readouterr().out
  want = _script_output(source)
  assert len(want.splitlines()[0].split(",")) == 8  # every device's
  assert _script_output(port) == want


def test_an_output_read_per_device_keeps_its_devices(tmp_path, capsys):
  source, port = tmp_path / "per_device.py", tmp_path / "per_device_g.py"
  source.write_text(PER_DEVICE)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  # The state's unreplicate goes; the per-device loss keeps its [devices]
  # axis (every device's loss printed), so its unreplicate stays.
  text = port.read_text()
  assert "jax_utils.unreplicate(loss)" in text
  assert "jax_utils.unreplicate(w)" not in text
  assert "keep pmap's stacked layout" in out
  want = _script_output(source)
  assert want.count("\n") == 5 and len(want.splitlines()[3].split(",")) > 8
  assert _script_output(port) == want


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
  for number, text in re.findall(r"first\.py:(\d+): changed: (\S+)", out):
    said = text.split("(")[0].rstrip(".")
    held = lines[int(number) - 1]
    assert (said in held or (said == "pmap" and "_pmap_waited" in held)
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
  # the mapped arguments around it are placed as anywhere else.
  source, port = tmp_path / "static.py", tmp_path / "static_g.py"
  source.write_text(STATIC)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "static_broadcasted_argnums (2,) as jit's static_argnums" in out
  program = rewrite_helpers.without_helpers(port.read_text())
  assert not STACKED.findall(program), STACKED.findall(program)
  assert "in_specs=((jax.P(), jax.P(\"batch\")), jax.P(\"batch\"))" in program
  want = _script_output(source)
  assert want.count("\n") == 5
  assert _script_output(port) == want


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
