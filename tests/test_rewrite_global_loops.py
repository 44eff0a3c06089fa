"""`--global` writes `check_vma=False` on a step that runs a loop out of
its reading's check (compare/_src/rewrite/write/global_loops.py, issue 74).

flax lm1b's decode step calls `temperature_sampler.temperature_sample`,
whose `lax.while_loop` starts its tokens as `jnp.zeros` (no device varies
them) and samples them from each device's logits: under shard_map's check
of varying values jax refuses the loop, which pmap never checked. The
rewrite reads the call (a function of the program's own module, out of
view) or a jax loop in the step, and writes the step unchecked; a step
with neither keeps jax's default. The refusal itself is shown on 8
emulated devices, and the reading's two rules are each shown to matter
(a plant that drops one leaves its step checked).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare import rewrite
from compare._src.rewrite.write import global_loops

PROGRAM = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np

import sampler


def decode_step(inputs, key):
  return sampler.sample(inputs, key)


def loop_step(inputs):
  def body(i, carry):
    return carry + inputs.sum()
  return jax.lax.fori_loop(0, 3, body, jnp.zeros(()))


def plain_step(inputs):
  return jnp.tanh(inputs) * 2


p_decode = jax.pmap(decode_step, axis_name="batch")
p_loop = jax.pmap(loop_step, axis_name="batch")
p_plain = jax.pmap(plain_step, axis_name="batch")


def main():
  n = jax.local_device_count()
  x = np.ones((n, 2, 3), np.float32)
  keys = jax.random.split(jax.random.key(0), n)
  print(p_decode(x, keys), p_loop(x), p_plain(x))


if __name__ == "__main__":
  main()
'''


def _written(tmp_path) -> dict:
  """Each step's line of shard_map arguments in the `--global` output."""
  source = tmp_path / "train.py"
  source.write_text(PROGRAM)
  port = tmp_path / "train_global.py"
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  text = port.read_text()
  steps = {}
  for name in ("p_decode", "p_loop", "p_plain"):
    start = text.index(f"{name} = ")
    ends = [text.find(end, start + 1) for end in ("\np_", "\n\n")]
    steps[name] = text[start:min(e for e in ends if e > 0)]
  return steps


def test_a_step_with_a_loop_out_of_view_runs_unchecked(tmp_path, capsys):
  steps = _written(tmp_path)
  out = capsys.readouterr().out
  assert "check_vma=False" in steps["p_decode"], steps
  assert "check_vma=False" in steps["p_loop"], steps
  assert "check_vma" not in steps["p_plain"], steps
  # The report names the call and why.
  assert "the step calls sampler.sample(...) (line 12)" in out, out
  assert "the step calls jax.lax.fori_loop(...)" in out, out


@pytest.mark.parametrize("plant", ["no own modules", "no loops"])
def test_each_rule_is_needed(tmp_path, monkeypatch, plant):
  """The negative controls: without a rule its step keeps jax's check."""
  if plant == "no own modules":
    monkeypatch.setattr(global_loops, "own_modules", lambda module: set())
    left = "p_decode"
  else:
    monkeypatch.setattr(global_loops, "LOOPS", ())
    left = "p_loop"
  steps = _written(tmp_path)
  assert "check_vma" not in steps[left], steps


def test_jax_refuses_such_a_loop_under_its_check():
  """Why: a carry started unvarying, returned varying, under the check
  (what lm1b's sampler does); unchecked it runs as pmap ran it."""
  mesh = jax.make_mesh((8,), ("batch",))

  def step(x):
    return jax.lax.fori_loop(0, 2, lambda i, c: c + x.sum(), jnp.zeros(1))

  rows = np.arange(16, dtype=np.float32)
  x = jax.device_put(rows, jax.NamedSharding(mesh, jax.P("batch")))
  for check in (True, False):
    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=jax.P("batch"),
                              out_specs=jax.P("batch"), check_vma=check))
    if check:
      with pytest.raises(TypeError, match="output types match"):
        f(x)
    else:
      assert np.array_equal(np.asarray(f(x)), np.asarray(jax.pmap(step)(
          rows.reshape(8, 2))).reshape(-1))
