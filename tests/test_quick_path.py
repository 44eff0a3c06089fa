"""Runs the guide's quick path as a reader would: each region's text alone.

`docs/quick_path.py` holds two regions, the pmap program (`quick-before`)
and its port (`quick-after`). Each is executed here as the guide shows it
(the text between its markers, in a namespace of its own), so a region that
leans on a name from outside itself fails. Then: the port ends bitwise where
pmap ends, and the `check_vma` claim in the port's comment is measured.
"""

import ast
import contextlib
import io
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from docs.guide.sources import regions

_FILE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "quick_path.py"
_TAGS = ("quick-before", "quick-after")
N = 8


def _region(tag):
  return regions(_FILE)[tag]


@pytest.fixture(scope="module", name="ran")
def _ran():
  """Each region run once as its own program: namespace and what it
  printed."""
  out = {}
  for tag in _TAGS:
    namespace, printed = {"__name__": "__main__"}, io.StringIO()
    with contextlib.redirect_stdout(printed):
      exec(compile(_region(tag), tag, "exec"), namespace)  # pylint: disable=exec-used
    out[tag] = namespace, printed.getvalue()
  return out


def _equal(a, b):
  return all(jax.tree.leaves(jax.tree.map(np.array_equal, a, b)))


@pytest.mark.parametrize("tag", _TAGS)
def test_region_fits_the_guide(tag):
  lines = _region(tag).splitlines()
  assert len(lines) <= 45, f"{tag}: {len(lines)} lines"
  assert max(map(len, lines)) <= 80
  assert "8 devices" in lines[0]  # says what it assumes
  # 2-space blocks (continuation lines may align with an open bracket).
  offsets = {node.col_offset for node in ast.walk(ast.parse("\n".join(lines)))
             if isinstance(node, ast.stmt)}
  assert offsets <= {0, 2, 4} and 2 in offsets, offsets
  assert not any("\t" in l for l in lines)


@pytest.mark.parametrize("tag", _TAGS)
def test_region_runs_and_learns(ran, tag):
  namespace, printed = ran[tag]
  assert re.fullmatch(r"final loss: \d+\.\d{6}\n", printed), printed
  loss = np.asarray(namespace["loss"]).reshape(-1)[0]
  # The last batch, whole, under the initial params: what training improved.
  batch = jax.tree.map(lambda a: np.asarray(a).reshape(64, -1),
                       namespace["batch"])
  # Initialised again: the port's `params` went with the donated state
  # (device_put kept its buffer for device 0, the first step donated it).
  model = namespace["model"]
  params = model.init(jax.random.key(0), jnp.ones((1, 4)))["params"]
  pred = model.apply({"params": params}, batch["x"])
  initial = float(jnp.mean((pred - batch["y"]) ** 2))
  assert loss < 0.75 * initial, (loss, initial)


def test_port_is_bitwise_pmap(ran):
  before, _ = ran["quick-before"]
  after, _ = ran["quick-after"]
  replicas = before["state"]
  first = jax.tree.map(lambda a: np.asarray(a)[0], replicas)
  # pmap kept a copy per device, all equal; the port keeps one.
  assert all(_equal(first, jax.tree.map(lambda a, k=k: np.asarray(a)[k],
                                        replicas)) for k in range(N))
  assert np.asarray(before["loss"]).shape == (N,)
  assert np.asarray(after["loss"]).shape == ()
  assert np.array_equal(np.asarray(before["loss"])[0], after["loss"])
  assert _equal(first.params, after["state"].params)
  assert _equal(first.opt_state, after["state"].opt_state)
  assert int(first.step) == int(after["state"].step) == 5


def _train_step(*edits):
  """The port's `train_step`, its text edited (old, new), defined alone."""
  text = _region("quick-after")
  for old, new in edits:
    assert text.count(old) == 1, old
    text = text.replace(old, new)
  tree = ast.parse(text)
  tree.body = [node for node in tree.body if isinstance(
      node, (ast.Import, ast.ImportFrom, ast.FunctionDef))]
  namespace = {}
  exec(compile(tree, "variant", "exec"), namespace)  # pylint: disable=exec-used
  return namespace["train_step"]


# Stores the gradients `apply_gradients` hands it as its state, updates
# nothing: `train_step` itself, unchanged, then returns its gradients.
_KEEP_GRADS = optax.GradientTransformation(
    lambda params: jax.tree.map(jnp.zeros_like, params),
    lambda grads, state, params=None: (
        jax.tree.map(jnp.zeros_like, grads), grads))

_PMEAN_GRADS = ('  grads = lax.pmean(grads, "data")\n', "")
_PMEAN_IN_LOSS = ('    return jnp.mean((pred - batch["y"]) ** 2)\n',
                  '    return lax.pmean(jnp.mean((pred - batch["y"]) ** 2), '
                  '"data")\n')
_PCAST = ("(loss_fn)(state.params)",
          '(loss_fn)(lax.pcast(state.params, "data", to="varying"))')


def test_check_vma_true_gives_n_times_the_gradient(ran):
  """What the comment at the port's shard_map call says, measured."""
  after, _ = ran["quick-after"]
  state = after["state"].replace(
      tx=_KEEP_GRADS, opt_state=_KEEP_GRADS.init(after["state"].params))
  batch = after["batch"]

  def grads(step, check_vma):
    run = jax.jit(jax.shard_map(
        step, mesh=after["mesh"], in_specs=(P(), P("data")),
        out_specs=(P(), P()), check_vma=check_vma))
    return run(state, batch)[0].opt_state

  right = grads(after["train_step"], False)  # as the region has it
  x, y = np.asarray(batch["x"]), np.asarray(batch["y"])
  whole = jax.jit(jax.grad(lambda p: jnp.mean(
      (state.apply_fn({"params": p}, x) - y) ** 2)))(state.params)
  assert all(jax.tree.leaves(jax.tree.map(
      lambda a, b: np.allclose(a, b, rtol=1e-5, atol=1e-7), right, whole)))

  def factor(g):  # |g| / |right|, over every entry
    size = lambda t: sum(float(np.abs(a).sum()) for a in jax.tree.leaves(t))
    return size(g) / size(right)

  def n_times_right(g):
    return all(jax.tree.leaves(jax.tree.map(
        lambda a, b: np.allclose(a, N * b, rtol=1e-6, atol=0), g, right)))

  # check_vma=True, the pmean kept: N times too large, every entry.
  kept = grads(after["train_step"], True)
  assert n_times_right(kept) and factor(kept) == pytest.approx(N, rel=1e-6)
  # Dropping the pmean changes nothing: the gradient comes back summed.
  dropped = grads(_train_step(_PMEAN_GRADS), True)
  assert n_times_right(dropped)
  assert factor(dropped) == pytest.approx(N, rel=1e-6)
  # Right under True, bitwise: the loss averaged inside the differentiated
  # function (and no pmean of grads), or params cast to varying first.
  assert _equal(grads(_train_step(_PMEAN_IN_LOSS, _PMEAN_GRADS), True),
                right)
  assert _equal(grads(_train_step(_PCAST), True), right)
