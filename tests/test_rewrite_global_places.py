"""`python -m compare.rewrite --global`: each construct the second step
cannot take is reported by line (exit 1), and the first step written in
its place: pmap's layout at every call site, no placement of the second.
"""

import pathlib
import re

import pytest

from compare import rewrite
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order


_STEP = '''
import jax
from flax import jax_utils
from flax.training import common_utils

def train_step(state, batch):
  return state, jax.lax.pmean(batch, "batch")

p_step = jax.pmap(train_step, axis_name="batch")
'''

def assert_places(out: str, stem: str, why: str) -> None:
  """`out`, a report, names a place of the global step in `stem`.py for
  `why`, by line, and each place names the guide's page a person follows."""
  lines = [line for line in out.splitlines() if why in line]
  assert lines, out
  assert all(re.search(rf"{stem}\.py:\d+: NEEDS A PERSON: global step not "
                       "written", line) for line in lines), lines
  assert all(re.search(r"docs/[A-Z-]+\.md#[a-z-]+", line)
             for line in out.splitlines() if "NEEDS A PERSON" in line), out


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
    "a tuple holding a replicated value, kept whole": (
        "def create(s):\n"
        "  s = jax_utils.replicate(s)\n"
        "  return s, 0\n"
        "def run(s, b):\n"
        "  out = create(s)\n"
        "  s, m = p_step(out[0], common_utils.shard(b))\n",
        "create returns a replicated value (line 12): call it as `x, y = "
        "create(...)`"),
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
        "s holds values of different layouts here"),
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
    # The loop's first value: its callers' (followed), a layout at one
    # and another at the other.
    "a loop's state from callers that disagree": (
        "def run(s, bs):\n"
        "  for b in bs:\n"
        "    s, m = p_step(s, common_utils.shard(b))\n"
        "  return m\n"
        "r = jax_utils.replicate(s0)\n"
        "run(r, [b0])\n"
        "run(np.stack([s0] * 8), [b0])\n",
        "r is placed once on the mesh now"),
    # A local of a step's name in another function is not the step: its
    # calls would take the global arrays the step takes.
    "a local of a step's name": (
        "def debug(s, b):\n"
        "  p_step = lambda s, b: (s, b.shape)\n"
        "  return p_step(s, b)\n"
        "s = jax_utils.replicate(s0)\n"
        "x = common_utils.shard(b0)\n"
        "s, m = p_step(s, x)\n"
        "print(debug(s, x))\n",
        "p_step is bound in debug at line"),
    # A nested function reads the value when it is called: written before
    # the binding, it still sees the replicated state (a false pass before).
    "read in a nested function": (
        "def run(s0, b0):\n"
        "  def show():\n"
        "    print(s.shape)\n"
        "  s = jax_utils.replicate(s0)\n"
        "  x = common_utils.shard(b0)\n"
        "  show()\n"
        "  out, m = p_step(s, x)\n"
        "  return m\n",
        "s is placed once on the mesh now"),
    # Either side of an `if` may have run: a replicated state on one, one
    # stacked by hand on the other (a false pass before: the last binding
    # by line decided, and the replicate was placed P() all the same).
    "bound on either side of an if": (
        "def run(restore, s0, b0):\n"
        "  if restore:\n"
        "    s = jax_utils.replicate(s0)\n"
        "  else:\n"
        "    s = np.stack([s0] * 8)\n"
        "  out, m = p_step(s, common_utils.shard(b0))\n"
        "  return m\n",
        "s holds values of different layouts here (bound at lines"),
    # A `try` whose body placed it may have failed before the binding.
    "bound in a try": (
        "def run(s0, b0):\n"
        "  s = np.stack([s0] * 8)\n"
        "  try:\n"
        "    s = jax_utils.replicate(s0)\n"
        "  except ValueError:\n"
        "    pass\n"
        "  out, m = p_step(s, common_utils.shard(b0))\n"
        "  return m\n",
        "s holds values of different layouts here (bound at lines"),
    # An `except` handler runs only where its `try` failed: its binding
    # may not have run (a false pass were it taken as always run).
    "bound in an except handler": (
        "def run(s0, b0):\n"
        "  s = np.stack([s0] * 8)\n"
        "  try:\n"
        "    b0 = np.asarray(b0)\n"
        "  except ValueError:\n"
        "    s = jax_utils.replicate(s0)\n"
        "  out, m = p_step(s, common_utils.shard(b0))\n"
        "  return m\n",
        "s holds values of different layouts here (bound at lines"),
    # One output layout per step: unpacked at one call, kept whole at the
    # other, its parts cannot be told.
    "unpacked at one call, kept whole at another": (
        "s = jax_utils.replicate(s0)\n"
        "s, m = p_step(s, common_utils.shard(b0))\n"
        "out = p_step(s, common_utils.shard(b0))\n"
        "print(out)\n",
        "p_step's output is unpacked at some calls and kept whole at others"),
    # One in_specs per step: a replicated state at one call, a state
    # stacked by hand at the other.
    "called with two layouts": (
        "s = jax_utils.replicate(s0)\n"
        "s, m = p_step(s, common_utils.shard(b0))\n"
        "t, m = p_step(np.stack([s0] * 8), common_utils.shard(b0))\n",
        "p_step is called with arguments of other layouts than at line"),
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
  assert_places(out, "team", why)
  # The first step is written instead: pmap's layout at every call site.
  assert "jax.shard_map(" in port.read_text()
  assert "jax.device_put(" not in port.read_text()


def test_every_page_of_the_guide_a_message_names_exists():
  # A place's reference is a claim: the page and its anchor exist.
  root = pathlib.Path(__file__).resolve().parent.parent
  named = set()
  for source in (root / "compare" / "_src").rglob("*.py"):
    text = re.sub(r'"\s*\n\s*f?"', "", source.read_text())  # one literal
    named |= set(re.findall(r"docs/([A-Z-]+\.md)#([a-z0-9-]+)", text))
  assert len(named) > 5, named
  for page, anchor in sorted(named):
    assert f'<a id="{anchor}">' in (root / "docs" / page).read_text(), (
        page, anchor)


CLOSURE = """
import jax
import numpy as np
from flax import jax_utils
from flax.training import common_utils


def train_step(state, batch):
  return state + jax.lax.pmean(batch.sum(), "batch"), batch.sum()


def main():
  p_step = jax.pmap(train_step, axis_name="batch")
  state = jax_utils.replicate(np.float32(0))
  x = common_utils.shard(np.arange(48, dtype=np.float32).reshape(16, 3))

  def step(s):
    new, metrics = p_step(s, x)
    return new, metrics

  for _ in range(3):
    state, m = step(state)
    print(np.asarray(m).tolist())
  print(float(jax_utils.unreplicate(state)))


main()
"""


def test_a_nested_function_giving_the_step_its_values_is_taken(tmp_path,
                                                               capsys):
  # The closure's reads are the step's arguments: taken, and the port
  # prints pmap's numbers (per device metrics, the state).
  source, port = tmp_path / "closure.py", tmp_path / "closure_g.py"
  source.write_text(CLOSURE)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "0 place(s) need a person" in out, out
  assert "jax_utils.replicate(" not in port.read_text()
  assert _script_output(port) == _script_output(source)


# Inside the step, per-device values bound on either side of an `if`, as
# flax imagenet's `dynamic_scale` is (`state.dynamic_scale`, then the
# scaler's output when there is one): none is placed, none is a place.
BRANCHES = """
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils
from flax import struct
from flax.training import common_utils


@struct.dataclass
class State:
  w: jnp.ndarray
  scale: jnp.ndarray


def scaled(scale, batch):
  return scale * 1.5, batch.sum()


def train_step(state, batch, use_scale=True):
  scale = state.scale
  if use_scale:
    scale, total = scaled(scale, batch)
  else:
    total = batch.sum()
  new_state = state.replace(w=state.w + jax.lax.pmean(total, "batch"))
  if use_scale:
    new_state = new_state.replace(scale=scale)
  return new_state, total


def main(restore):
  p_step = jax.pmap(train_step, axis_name="batch")
  if restore:
    state = jax_utils.replicate(State(np.float32(1), np.float32(1)))
  else:
    state = jax_utils.replicate(State(np.float32(0), np.float32(1)))
  x = common_utils.shard(np.arange(48, dtype=np.float32).reshape(16, 3))
  state, m = p_step(state, x)
  final = jax_utils.unreplicate(state)
  print(float(final.w), float(final.scale), np.asarray(m).tolist())


main(len(sys.argv) > 1)
"""


def test_the_same_layout_on_either_side_of_an_if_is_taken(tmp_path, capsys):
  source, port = tmp_path / "branches.py", tmp_path / "branches_g.py"
  source.write_text(BRANCHES)
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "0 place(s) need a person" in out, out
  # Both sides placed with P(): one sharding, named once, used twice.
  text = port.read_text()
  assert "replicated = jax.NamedSharding(mesh, jax.P())" in text
  assert text.count(", replicated)") == 2, text
  assert _script_output(port) == _script_output(source)
