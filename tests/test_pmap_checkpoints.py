"""`compare.from_pmap_checkpoint`: a pmap program's checkpoint into its port.

The recipe (`docs/pmap_checkpoint.py`): a pmap program with a stacked
`TrainState`, a raw `uint32[2]` key and `optax.MultiSteps` saved after 6 of
4-microbatch calls; restored into the port's typed-key, replicated state;
both continued 3 calls, across an optimiser step. Only public names.
"""

import flax.jax_utils
import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import compare
from docs import pmap_checkpoint as recipe


def _host(tree):
  """Host copies; typed keys as their data."""
  return jax.tree.map(
      lambda x: np.asarray(jax.random.key_data(x)
                           if jax.dtypes.issubdtype(x.dtype,
                                                    jax.dtypes.prng_key)
                           else x), jax.device_get(tree))


def _bitwise(a, b):
  """Every leaf of `a` equals `b`'s at the same path, bit for bit (static
  fields such as `apply_fn` aside)."""
  a, b = (jax.tree_util.tree_flatten_with_path(_host(t))[0] for t in (a, b))
  assert [p for p, _ in a] == [p for p, _ in b]
  return all(np.array_equal(x, y) for (_, x), (_, y) in zip(a, b))


@pytest.fixture(scope="module", name="saved")
def _saved(tmp_path_factory):
  """(pmap's state after 6 calls, its checkpoint's path, the mesh)."""
  path = str(tmp_path_factory.mktemp("pmap") / "ckpt")
  mesh = jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  return recipe.pmap_program(path), path, mesh


@pytest.fixture(scope="module", name="uninterrupted")
def _uninterrupted(saved, calls=9):
  """The port trained from the start without a checkpoint (9 calls)."""
  mesh = saved[2]
  fresh = jax.device_put(recipe.make_state(jax.random.key(1)),
                         NamedSharding(mesh, P()))
  old = flax.jax_utils.replicate(recipe.make_state(jax.random.PRNGKey(1)))
  return recipe.continue_both(old, fresh, mesh, start=0, calls=calls)[1]


def _first_copy(old, like):
  """Device 0's copy of pmap's stacked state, in `like`'s tree."""
  return jax.tree.unflatten(jax.tree.structure(like), jax.tree.leaves(
      jax.tree.map(lambda x: x[0], _host(old))))


def test_restored_mid_accumulation_continues_bitwise(saved, uninterrupted):
  old, path, mesh = saved
  new = recipe.restore_in_port(path, mesh)
  assert jax.dtypes.issubdtype(new.rng.dtype, jax.dtypes.prng_key)
  assert int(new.opt_state.mini_step) == 2  # 6 calls of every 4
  assert np.abs(_host(new.opt_state.acc_grads)["kernel"]).max() > 0
  assert _bitwise(new, _first_copy(old, new))  # what pmap saved, exactly
  old, new, (pmap_losses, port_losses) = recipe.continue_both(old, new, mesh)
  assert int(new.opt_state.gradient_step) == 2  # an update at call 8
  assert np.array_equal(pmap_losses, port_losses)
  # Bitwise against the port that never stopped. Against pmap, Adam's `mu`
  # at the second update is 1 ulp off with or without a checkpoint (XLA:CPU,
  # jax 0.10.2): the parameters, as checked here, are still bitwise.
  assert _bitwise(new, uninterrupted)
  assert _bitwise(new.params, _first_copy(old, new).params)


def test_a_restore_that_drops_the_accumulation_is_caught(saved,
                                                        uninterrupted):
  # Negative control: the restore as a careless one would do it (the
  # accumulated microbatches dropped) must end elsewhere.
  old, path, mesh = saved
  new = recipe.restore_in_port(path, mesh)
  dropped = new.replace(opt_state=new.opt_state._replace(
      mini_step=new.opt_state.mini_step * 0,
      acc_grads=jax.tree.map(lambda g: g * 0, new.opt_state.acc_grads)))
  _, dropped, _ = recipe.continue_both(old, dropped, mesh)
  assert not _bitwise(dropped.params, uninterrupted.params)


def test_bad_checkpoints_are_refused_naming_the_leaf():
  like = {"w": np.zeros((3,), np.float32), "key": jax.random.key(0)}
  raw_key = np.asarray(jax.random.PRNGKey(0))
  good = {"w": np.ones((8, 3), np.float32), "key": np.stack([raw_key] * 8)}
  restored = compare.from_pmap_checkpoint(good, like)
  assert np.array_equal(restored["w"], np.ones(3))
  assert np.array_equal(jax.random.key_data(restored["key"]), raw_key)
  differ = {**good, "w": np.arange(24, dtype=np.float32).reshape(8, 3)}
  with pytest.raises(ValueError, match=r"\['w'\]: the 8 device copies differ"):
    compare.from_pmap_checkpoint(differ, like)
  with pytest.raises(ValueError, match=r"\['w'\]: saved shape \(8, 4\)"):
    compare.from_pmap_checkpoint({**good, "w": np.ones((8, 4))}, like)
  with pytest.raises(ValueError, match=r"\['key'\]: not in the checkpoint"):
    compare.from_pmap_checkpoint({"w": good["w"]}, like)
  with pytest.raises(ValueError, match=r"\['w'\]: saved dtype float64"):
    compare.from_pmap_checkpoint({**good, "w": np.ones((8, 3))}, like)
