"""A step that returns its state alone, proved through the public API only.

JAX's SPMD MNIST example (`tests/rewrite_inputs/jax_spmd_mnist.py`) writes
`spmd_update(params, batch) -> params`: no loss. `compare.adapt_step` of it
reports no metrics, and the proof judges the state alone: the port passes,
and a mistake fails at its step, planted by the harness or in the port's
own code from step 2 on.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import compare
from compare import testing


def _loss(params, batch):
  x, y = batch
  hidden = jnp.tanh(x @ params[0][0] + params[0][1])
  return jnp.mean((hidden @ params[1][0] + params[1][1] - y) ** 2)


def _update(params, batch, late_scale=1.0):
  grads = jax.grad(_loss)(params, batch)
  # The planted mistake, where asked: from the second step on (the biases
  # start at zero and have moved after one step).
  scale = jnp.where(jnp.any(params[1][1] != 0), late_scale, 1.0)
  return jax.tree.map(lambda p, g: p - 0.01 * scale * lax.psum(g, "batch"),
                      params, grads)


def _batches(i):
  rows = np.random.RandomState(i)
  return (rows.randn(64, 16).astype(np.float32),
          rows.randn(64, 4).astype(np.float32))


def _port(late_scale=1.0):
  mesh = jax.make_mesh((8,), ("batch",))
  rows = np.random.RandomState(0)
  init = [(rows.randn(16, 32).astype(np.float32) * 0.1,
           np.zeros(32, np.float32)),
          (rows.randn(32, 4).astype(np.float32) * 0.1,
           np.zeros(4, np.float32))]
  port_update = jax.jit(jax.shard_map(
      lambda p, b: _update(p, b, late_scale), mesh=mesh,
      in_specs=(jax.P(), jax.P("batch")), out_specs=jax.P(),
      check_vma=False))
  return compare.Port(
      name="state only", init=init,
      pmap_step=compare.adapt_step(jax.pmap(_update, axis_name="batch")),
      port_step=compare.adapt_step(port_update),
      mesh=mesh, batches=_batches, steps=4)


def test_a_step_without_metrics_is_proved_on_its_state():
  proof = compare.prove(_port(), windows=0)
  assert proof.verdict == "pass", proof.first_failure
  assert "judged 5 of 5 leaves" in proof.table()


def test_a_planted_update_fails_at_its_step():
  with pytest.raises(AssertionError, match="first at step 3: port vs pmap"):
    testing.assert_port_equivalent(_port(), steps=4,
                                   control="update-1pct-at:3")


def test_a_port_wrong_from_its_second_step_fails_there():
  proof = compare.prove(_port(late_scale=1.01), windows=0)
  assert proof.first_failure.startswith("first at step 2: port vs pmap"), \
      proof.first_failure
