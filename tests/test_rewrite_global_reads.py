"""`python -m compare.rewrite --global`: values read beyond the step.

A replicated value returned by a function, an output read per device, and
`[0]`, which is device 0's copy of an array but a tuple's first element:
each program taken prints the original's numbers; the one the reading
cannot tell is refused by line.
"""

import re

from compare import rewrite
from compare._src.rewrite import pipeline
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order


def _taken(tmp_path, capsys, text, name):
  """`text` written as `name`.py and rewritten with `--global`: exit 0,
  no place for a person. Returns `(source, port, report)`."""
  source, port = tmp_path / f"{name}.py", tmp_path / f"{name}_g.py"
  source.write_text(text)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "0 place(s) need a person" in out, out
  return source, port, out


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
  source, port, _ = _taken(tmp_path, capsys, RETURNED, "returned")
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
  source, port, _ = _taken(tmp_path, capsys, TUPLE_METRICS, "tuple_out")
  want = _script_output(source)
  assert len(want.splitlines()[0].split(",")) == 8  # every device's
  assert _script_output(port) == want


def test_an_output_read_per_device_keeps_its_devices(tmp_path, capsys):
  source, port, out = _taken(tmp_path, capsys, PER_DEVICE, "per_device")
  # The state's unreplicate goes; the per-device loss keeps its [devices]
  # axis (every device's loss printed), so its unreplicate stays.
  text = port.read_text()
  assert "jax_utils.unreplicate(loss)" in text
  assert "jax_utils.unreplicate(w)" not in text
  assert "keep pmap's stacked layout" in out
  want = _script_output(source)
  assert want.count("\n") == 5 and len(want.splitlines()[3].split(",")) > 8
  assert _script_output(port) == want


# Two trees placed and read back together (flax's pixelcnn example:
# `optimizer, ema = jax_utils.replicate((optimizer, ema))`, and its
# `save_checkpoint`'s `jax_utils.unreplicate((optimizer, ema))`).
TOGETHER = PER_DEVICE.replace(
    "p_step = jax.pmap(train_step, axis_name=\"batch\", donate_argnums=(0,))",
    "p_step = jax.pmap(lambda w, ema, b: train_step(w, b) + (ema,),\n"
    "                  axis_name=\"batch\")").replace(
        "  w = jax_utils.replicate(np.zeros(3, np.float32))\n",
        "  w, ema = jax_utils.replicate((np.zeros(3, np.float32),\n"
        "                                np.ones(2, np.float32)))\n").replace(
            "    w, loss = p_step(w, batch)\n",
            "    w, loss, ema = p_step(w, ema, batch)\n").replace(
                "  print(repr(float(jax_utils.unreplicate(w)[1])))\n",
                "  w, ema = jax_utils.unreplicate((w, ema))\n"
                "  print(repr(float(w[1])), ema.tolist())\n")


def test_trees_placed_and_read_back_together(tmp_path, capsys):
  assert TOGETHER.count("(w, ema)") == 1 and "((np.zeros" in TOGETHER
  source, port, _ = _taken(tmp_path, capsys, TOGETHER, "together")
  text = port.read_text()
  assert "w, ema = (w, ema)" in text
  assert "jax_utils.replicate(" not in text
  assert _script_output(port) == _script_output(source)


def test_a_tuple_read_back_with_a_stacked_part_is_refused():
  # The loss is read per device (kept stacked): dropping the unreplicate
  # of `(w, loss)` would hand the rest of the program [devices] losses.
  both = pipeline.rewrite_global_source(TOGETHER.replace(
      "  w, ema = jax_utils.unreplicate((w, ema))\n",
      "  w, loss = jax_utils.unreplicate((w, loss))\n"))
  person = [f.text for f in both.findings if f.kind == "person"]
  assert any("unreplicate of a tuple whose parts are not all replicated"
             in text for text in person), person
  assert "jax.device_put(" not in both.code


# flax's `common_utils.shard`, copied into the program as teams do.
COPIED_SHARD = PER_DEVICE.replace(
    "def main():\n",
    "def shard(xs):\n"
    "  return jax.tree_util.tree_map(\n"
    "      lambda x: x.reshape((jax.local_device_count(), -1) + x.shape[1:]),"
    " xs)\n\n\ndef main():\n").replace("common_utils.shard(", "shard(")


def test_a_copy_of_flax_shard_places_the_global_batch(tmp_path, capsys):
  source, port, out = _taken(tmp_path, capsys, COPIED_SHARD, "copied")
  assert re.search(r"changed: shard\(\.\.\.\) -> "
                   r"jax\.make_array_from_process_local_data", out), out
  assert "batch = shard(" not in port.read_text()
  assert _script_output(port) == _script_output(source)
  # Its negative control: rows split the other way round are no split
  # over devices the second step knows; kept as the program stacked them.
  other = COPIED_SHARD.replace("(jax.local_device_count(), -1)",
                               "(-1, jax.local_device_count())")
  both = pipeline.rewrite_global_source(other)
  assert "batch = shard(" in both.code
