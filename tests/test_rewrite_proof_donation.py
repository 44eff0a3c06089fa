"""`--prove --global` runs the written step as it donates.

The proof adapts the written global step to the Port's layout inside a jit
of its own (`on_port_layout.on_global_mesh`), and a jit inside a jit
donates nothing: where the written step donates its state, the adapter
must too, or the proof holds each step's old state beside its new (flax
nlp_seq at its default size, 24M parameters: 18.2 and 18.7 GB
peak in two runs without, 14.2 and 14.6 GB with).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare._src.rewrite.proof import on_port_layout

AXES = {"in_axes": (None, None), "out_axes": (None, None)}


def _step(donate):
  return jax.jit(lambda state, batch: (
      jax.tree.map(lambda x: x + batch.sum(), state),
      {"loss": batch.mean()}), donate_argnums=(0,) if donate else ())


@pytest.mark.parametrize("donate", [True, False])
def test_the_adapted_step_donates_the_state_where_the_written_one_does(
    donate):
  step = on_port_layout.on_global_mesh(_step(donate), AXES, 8)
  state = {"w": jnp.ones((64, 64))}
  new, metrics = step(state, jnp.arange(8.0))
  assert state["w"].is_deleted() is donate
  np.testing.assert_array_equal(new["w"], np.full((64, 64), 29.0))
  assert float(metrics["loss"]) == 3.5
  again, _ = step(new, jnp.arange(8.0))  # the second call: the same program
  assert new["w"].is_deleted() is donate and float(again["w"][0, 0]) == 57.0


def test_a_step_that_is_not_a_jit_donates_nothing():
  def plain(state, batch):
    return jax.tree.map(lambda x: x + batch.sum(), state), {"loss": 0.0}
  step = on_port_layout.on_global_mesh(plain, AXES, 8)
  state = {"w": jnp.ones(3)}
  step(state, jnp.arange(8.0))
  assert not state["w"].is_deleted()


def test_a_donating_step_wrapped_in_a_jit_of_ours_still_donates():
  # `on_port_layout.with_bound_keywords` binds a local pmap's
  # keyword arguments in a jit of its own (flax nlp_seq's dropout_rng).
  written = _step(True)
  wrapped = jax.jit(lambda state, batch: written(state, batch))
  step = on_port_layout.on_global_mesh(wrapped, AXES, 8)
  state = {"w": jnp.ones(3)}
  step(state, jnp.arange(8.0))
  assert state["w"].is_deleted()
