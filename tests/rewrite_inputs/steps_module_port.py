"""The team's Ports of the steps of tests/rewrite_inputs/steps_module.py,
steps_module_stax.py and steps_factory.py: what
the team's loop passes them, declared (`--global --prove` writes the global
step to this layout and proves it)."""

import jax
import numpy as np

import compare
from tests.rewrite_inputs import steps_factory
from tests.rewrite_inputs import steps_module
from tests.rewrite_inputs import steps_module_stax


def batches(i):
  x = np.random.default_rng(i).normal(size=(64, 3)).astype(np.float32)
  return {"x": x, "y": x @ np.float32([1, -2, 3]) + 0.5}


def _init():
  return {"w": np.zeros(3, np.float32), "b": np.float32(0)}


def port(steps=4):
  """`p_train_step` as it is: `(params, batch) -> (params, loss)`."""
  return compare.Port(
      name="steps_module", port_step=None, batches=batches, steps=steps,
      init=_init, pmap_step=steps_module.p_train_step,
      mesh=jax.make_mesh((8,), ("batch",)))


def update_port(steps=4):
  """`p_update(i, opt_state, batch)`, through `compare.adapt_step`."""
  return compare.Port(
      name="steps_module_update", port_step=None, batches=batches,
      steps=steps, init=lambda: (0, steps_module_stax.opt_init(_init())),
      pmap_step=compare.adapt_step(steps_module_stax.p_update,
                                   step_index=True),
      mesh=jax.make_mesh((8,), ("batch",)))


def factory_port(steps=4):
  """`steps_factory.make_step(...)`'s pmap, given a key per device after
  the batch (`static_args`: passed as they are)."""
  keys = jax.random.split(jax.random.key(0), 8)
  return compare.Port(
      name="steps_factory", port_step=None, batches=batches, steps=steps,
      init=_init, pmap_step=compare.adapt_step(
          steps_factory.make_step(0.1), static_args=(keys,)),
      mesh=jax.make_mesh((8,), ("batch",)))
