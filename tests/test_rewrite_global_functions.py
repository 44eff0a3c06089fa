"""`python -m compare.rewrite --global` through the program's own functions.

flax's imagenet example (2020-2024) syncs its replicated state in
`sync_batch_stats(state)` with a second pmap over a second axis, saves it in
`save_checkpoint(state, workdir)` with a tree map of `x[0]`, and returns it;
a team's `train(state, steps)` returns `(state, metrics)`. Each is followed
and the program prints the original's numbers; where the functions' calls
disagree, or a value goes where the reading does not follow it, the place
is named by line.
"""

import re

import pytest

from compare import rewrite
from compare._src.rewrite import rewrite_helpers
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order
from tests.test_rewrite_global_places import assert_places

SYNCED = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils
from flax import struct
from flax.training import common_utils
from jax import lax


@struct.dataclass
class State:
  w: jnp.ndarray
  stats: jnp.ndarray
  step: jnp.ndarray


def train_step(state, batch):
  def loss_fn(w):
    return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)
  loss, grad = jax.value_and_grad(loss_fn)(state.w)
  grad = lax.pmean(grad, "batch")
  # Per-device running statistics, as BatchNorm's without its pmean.
  stats = 0.9 * state.stats + 0.1 * jnp.mean(batch["x"], axis=0)
  return state.replace(w=state.w - 0.1 * grad, stats=stats,
                       step=state.step + 1), lax.pmean(loss, "batch")


cross_replica_mean = jax.pmap(lambda x: lax.pmean(x, "x"), "x")


def sync_stats(state):
  return state.replace(stats=cross_replica_mean(state.stats))


def save(state, log):
  state = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state))
  log.append(np.asarray(state.stats).round(6).tolist())


def report(metrics):
  print(np.asarray(metrics).round(5).tolist())  # one loss per device


def train(state, batches, log):
  p_step = jax.pmap(train_step, axis_name="batch")
  metrics = None
  for i, batch in enumerate(batches):
    state, metrics = p_step(state, common_utils.shard(batch))
    report(metrics)
    if i % 2 == 1:
      state = sync_stats(state)
      save(state, log)
  state = sync_stats(state)  # synced again, as before a checkpoint
  return state, metrics


def main():
  rng = np.random.default_rng(0)
  batches = []
  for _ in range(4):
    x = rng.normal(size=(32, 3)).astype(np.float32)
    batches.append({"x": x, "y": x @ np.float32([1, -2, 3])})
  state = State(np.zeros(3, np.float32), np.zeros(3, np.float32),
                np.int32(0))
  state = jax_utils.replicate(state)
  log = []
  state, metrics = train(state, batches, log)
  print(log)
  print(repr(float(jax_utils.unreplicate(metrics))))
  final = jax_utils.unreplicate(state)
  print(np.asarray(final.w).tolist(), int(final.step))


main()
'''


def _rewritten(tmp_path, capsys, text, name="team"):
  source, port = tmp_path / f"{name}.py", tmp_path / f"{name}_g.py"
  source.write_text(text)
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  return code, source, port, capsys.readouterr().out


def test_the_state_is_followed_through_the_programs_functions(tmp_path,
                                                              capsys):
  code, source, port, out = _rewritten(tmp_path, capsys, SYNCED)
  assert code == 0, out
  assert "0 place(s) need a person" in out, out
  text = rewrite_helpers.without_helpers(port.read_text())
  for gone in ("jax_utils.replicate(", "jax_utils.unreplicate(state)",
               "common_utils.shard(", "x[0]", "jax.pmap("):
    assert gone not in text, gone
  # The metrics, returned as the step gave them, stay per device (a
  # step's output is read as one value where the step's caller reads it).
  assert "jax_utils.unreplicate(metrics)" in text
  # The second pmap over its own axis: a mesh of its own, P() in and out.
  assert "mesh=_pmap_mesh(\"x\")" in text
  assert re.search(r"2 axes \(\['batch', 'x'\]\)", out), out
  assert _script_output(port) == _script_output(source)


def test_a_function_given_its_state_by_keyword_is_followed(tmp_path,
                                                         capsys):
  # `save(state=state, log=log)`: the keyword's name is no read of `state`.
  by_keyword = SYNCED.replace("      save(state, log)\n",
                              "      save(state=state, log=log)\n")
  assert by_keyword != SYNCED
  code, source, port, out = _rewritten(tmp_path, capsys, by_keyword)
  assert code == 0 and "0 place(s) need a person" in out, out
  assert "x[0]" not in rewrite_helpers.without_helpers(port.read_text())
  assert _script_output(port) == _script_output(source)


def test_public_functions_name_what_they_now_take_and_return(tmp_path,
                                                             capsys):
  _, _, _, out = _rewritten(tmp_path, capsys, SYNCED)
  for name, what in (("sync_stats", "takes state replicated and returns "
                      "global arrays"), ("save", "takes state replicated"),
                     ("train", "takes state replicated and returns global "
                      "arrays")):
    assert re.search(rf"team\.py:\d+: changed: callers in other files: "
                     rf"{name} {what}, as this file's calls give and read "
                     "them; a caller in another file, if any", out), (name,
                                                                      out)
  assert re.search(r", 3 public function\(s\) now taking or returning "
                   r"global arrays \(callers in other files: out of view\)",
                   out), out
  # Notes, not call sites: 3 placements (replicate, shard, tree map of
  # x[0]) and 3 reads (two unreplicates; the metrics' stays).
  private = SYNCED.replace("sync_stats", "_sync_stats")
  _, _, _, out = _rewritten(tmp_path, capsys, private, "private")
  assert "files: _sync_stats" not in out, out
  assert "files: train takes" in out, out


# Each: (what replaces what in SYNCED, the place's words).
BLOCKED = {
    # A parameter takes what every call gives it: one call gives it the
    # hand-stacked state, which keeps pmap's layout.
    "calls that disagree": (
        ("  log = []\n", "  log = []\n  sync_stats(np.stack([1.0] * 8))\n"),
        "the step's output is read per device at line(s) ["),
    # One call gives the parameter the replicated state, the other a state
    # stacked by hand.
    "a parameter given two layouts": (
        [("def main():\n", "def show(s):\n  print(jax_utils.unreplicate(s)"
          ".step)\n\n\ndef main():\n"),
         ("  log = []\n", "  log = []\n  show(state)\n  show(State(np.zeros("
          "(8, 3)), np.zeros((8, 3)), np.zeros(8, np.int32)))\n")],
        "show's parameter s is given values of different layouts: "
        "replicated at line"),
    # Read per device inside the function it is given to.
    "read per device in the function": (
        ("def save(state, log):\n", "def save(state, log):\n"
         "  print(state.stats.shape)\n"),
        "the step's output is read per device at line(s) ["),
    # A replicated state's field replaced by a value of another layout.
    "replace with a stacked value": (
        ("  return state.replace(stats=cross_replica_mean(state.stats))\n",
         "  return state.replace(stats=np.zeros((8, 3), np.float32))\n"),
        "state.replace(...) puts values of other layouts together"),
    # A tuple of a replicated state, kept whole: its element is read
    # where the reading does not follow it.
    "a tuple return kept whole": (
        ("  state, metrics = train(state, batches, log)\n",
         "  out = train(state, batches, log)\n  state, metrics = out\n"),
        "the step's output is read per device at line(s) ["),
    # Handed on as a value, its calls are not all in view.
    "a function handed on": (
        ("      state = sync_stats(state)\n",
         "      state = functools.reduce(lambda s, f: f(s), [sync_stats], "
         "state)\n"),
        "argument 0 of cross_replica_mean, `state.stats`: where it comes "
        "from is not in view"),
    # Taken by `**kwargs`: no parameter of its name to follow.
    "given to **kwargs": (
        [("def main():\n", "def peek(**parts):\n"
          "  print(parts[\"state\"].w.shape)\n\n\ndef main():\n"),
         ("  log = []\n", "  log = []\n  peek(state=state)\n")],
        "state is placed once on the mesh now"),
    # The function's name bound to another value: its calls may be that.
    "a function's name rebound": (
        ("def main():\n", "if False:\n  sync_stats = print\n\n\n"
         "def main():\n"),
        "argument 0 of cross_replica_mean, `state.stats`: where it comes "
        "from is not in view"),
    # A decorator may call it otherwise.
    "a decorated function": (
        ("def sync_stats(state):\n",
         "@functools.lru_cache\ndef sync_stats(state):\n"),
        "argument 0 of cross_replica_mean, `state.stats`: where it comes "
        "from is not in view"),
}


# Where the step's output is the one value out of view, it is the one
# place named (elsewhere each value the reading cannot follow is one).
ONE_REASON = ("calls that disagree", "read per device in the function",
              "a tuple return kept whole")


@pytest.mark.parametrize("case", sorted(BLOCKED))
def test_what_the_functions_do_not_show_is_reported_by_line(case, tmp_path,
                                                            capsys):
  changes, why = BLOCKED[case]
  text = SYNCED
  for old, new in changes if isinstance(changes[0], tuple) else [changes]:
    assert old in text
    text = text.replace(old, new)
  code, _, port, out = _rewritten(tmp_path, capsys, text)
  assert code == 1, out
  assert_places(out, "team", why)
  if case in ONE_REASON:
    # The one reason, not its echoes elsewhere (a `.replace` of the
    # stacked state blamed for the step's output put into it).
    assert all(why in line for line in out.splitlines()
               if "NEEDS A PERSON" in line), out
  assert "jax.device_put(" not in port.read_text()
