"""`python -m compare.rewrite --global` on vision_transformer's shapes.

google-research/vision_transformer's `vit_jax/train.py` (2024) makes its
step in a factory (`update_fn_repl = make_update_fn(...)`, which returns
the pmap), replicates `(params, opt_state)` and unpacks them, calls the
step over two lines, and evaluates with `infer_fn_repl(dict(params=
params_repl), images)`, a second pmap that names no axis. Each is read,
and the program prints the original's numbers; a factory called twice and
a dict of two layouts are refused by line.
"""

import pytest

from compare import rewrite
from compare._src.rewrite import rewrite_helpers
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order

VIT_SHAPED = '''
import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax


def make_update_fn(*, tx):
  def update_fn(params, opt_state, batch, rng):
    _, new_rng = jax.random.split(rng)
    noise = jax.random.normal(jax.random.fold_in(
        rng, jax.lax.axis_index("batch")), batch["x"].shape) * 0.01
    def loss_fn(params):
      pred = (batch["x"] + noise) @ params["w"]
      return jnp.mean((pred - batch["y"]) ** 2)
    l, g = jax.value_and_grad(loss_fn)(params)
    g = jax.tree.map(lambda x: jax.lax.pmean(x, axis_name="batch"), g)
    updates, opt_state = tx.update(g, opt_state)
    params = optax.apply_updates(params, updates)
    return params, opt_state, jax.lax.pmean(l, axis_name="batch"), new_rng

  return jax.pmap(update_fn, axis_name="batch", donate_argnums=(0,))


def predict(variables, x):
  return x @ variables["params"]["w"]


def batches(n):
  rng = np.random.default_rng(0)
  for _ in range(n):
    x = rng.normal(size=(8, 4, 3)).astype(np.float32)  # [devices, b, ...]
    yield {"x": x, "y": x @ np.float32([1, -2, 3])}


def train_and_evaluate():
  tx = optax.sgd(0.1, momentum=0.9)
  update_fn_repl = make_update_fn(tx=tx)
  infer_fn_repl = jax.pmap(functools.partial(predict))
  params = {"w": np.zeros(3, np.float32)}
  params_repl, opt_state_repl = flax.jax_utils.replicate(
      (params, tx.init(params)))
  update_rng_repl = flax.jax_utils.replicate(jax.random.PRNGKey(0))
  for step, batch in zip(range(1, 5), batches(4)):
    params_repl, opt_state_repl, loss_repl, update_rng_repl = update_fn_repl(
        params_repl, opt_state_repl, batch, update_rng_repl)
    print(step, repr(float(flax.jax_utils.unreplicate(loss_repl))))
  logits = infer_fn_repl(dict(params=params_repl), batch["x"])
  print(np.asarray(logits).round(5).tolist())
  return flax.jax_utils.unreplicate(params_repl)


print(train_and_evaluate()["w"].tolist())
'''


def _rewritten(tmp_path, capsys, text):
  source, port = tmp_path / "vit.py", tmp_path / "vit_global.py"
  source.write_text(text)
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  return code, source, port, capsys.readouterr().out


def test_vision_transformers_shapes_take_the_second_step(tmp_path, capsys):
  code, source, port, out = _rewritten(tmp_path, capsys, VIT_SHAPED)
  assert code == 0, out
  assert "0 place(s) need a person" in out, out
  text = rewrite_helpers.without_helpers(port.read_text())
  for gone in ("flax.jax_utils.replicate(", "unreplicate(", "jax.pmap("):
    assert gone not in text, gone
  # The factory's pmap: state, optimizer state and key P(); the batch the
  # program stacked itself, kept.
  assert ('in_specs=((jax.P(), jax.P(), jax.P("batch"), jax.P()), '
          'jax.P("batch"))') in text, text
  assert _script_output(port) == _script_output(source)


BLOCKED = {
    "a factory called twice": (
        ("  update_fn_repl = make_update_fn(tx=tx)\n",
         "  update_fn_repl = make_update_fn(tx=tx)\n"
         "  spare = make_update_fn(tx=tx)\n"),
        "make_update_fn returns a pmap (line 25) and is defined or called "
        "other than once"),
    "a dict of two layouts": (
        ("dict(params=params_repl)",
         "dict(params=params_repl, scale=np.ones((8, 1), np.float32))"),
        "a dict of values of different layouts"),
}


@pytest.mark.parametrize("case", sorted(BLOCKED))
def test_what_it_cannot_read_is_reported_by_line(case, tmp_path, capsys):
  (old, new), why = BLOCKED[case]
  assert old in VIT_SHAPED
  code, _, port, out = _rewritten(tmp_path, capsys,
                                  VIT_SHAPED.replace(old, new))
  assert code == 1, out
  lines = [line for line in out.splitlines() if why in line]
  assert lines and all("NEEDS A PERSON: global step not written" in line
                       for line in lines), out
  assert "jax.device_put(" not in port.read_text()
