"""The teams' Ports of the programs `--global` writes without helpers:
the pmap tutorial's `update` (params, xs, ys), its many-host version's, and
the flax-examples-style and many-host scripts' `p_train_step` (state,
batch). `python -m compare.rewrite FILE
--global --prove tests.rewrite_inputs.rewrite_ports:NAME` proves the
written step against the pmap (bench/runners/rewrite_global_runs.py)."""

import jax
import numpy as np

import compare
from tests.rewrite_inputs import flax_style_train
from tests.rewrite_inputs import tutorial_linear_regression as tutorial


def _rows(i):
  xs = np.random.default_rng(i).normal(size=(128, 1)).astype(np.float32)
  return {"xs": xs, "ys": (2 * xs - 1).astype(np.float32)}


def _tutorial_like_port(name, module, steps):
  """`module.update(params, xs, ys) -> (params, loss)`, its batch by key."""
  return compare.Port(
      name=name, port_step=None, batches=_rows, steps=steps,
      init=lambda: module.init(jax.random.key(123)),
      pmap_step=compare.adapt_step(module.update, batch_keys=("xs", "ys")),
      mesh=jax.make_mesh((8,), ("num_devices",)))


def tutorial_port(steps=4):
  """The pmap tutorial's `update(params, xs, ys)`."""
  return _tutorial_like_port("tutorial", tutorial, steps)


def axis_index_port(steps=4):
  """The tutorial whose step adds noise keyed by `lax.axis_index`."""
  from tests.rewrite_inputs import tutorial_axis_index  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  return _tutorial_like_port("tutorial_axis_index", tutorial_axis_index,
                             steps)


def multihost_tutorial_port(steps=4):
  """The many-host tutorial's `update(params, xs, ys)`: a file that joins
  `jax.distributed` in `main`, its step at module level."""
  from tests.rewrite_inputs import multihost_tutorial  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  return _tutorial_like_port("multihost_tutorial", multihost_tutorial, steps)


def _batch(i):
  return next(flax_style_train.batches(1 + i))


def flax_style_port(steps=4):
  """`p_train_step(state, batch) -> (state, metrics)`, as it is."""
  return compare.Port(
      name="flax_style", port_step=None, batches=_batch, steps=steps,
      init=lambda: flax_style_train.create_train_state(jax.random.key(0)),
      pmap_step=flax_style_train.p_train_step,
      mesh=jax.make_mesh((8,), ("batch",)))


def _multihost_batch(i):
  x = np.random.default_rng(100 + i).normal(size=(64, 16)).astype(np.float32)
  return {"x": x, "y": x[:, :4].argmax(-1).astype(np.int32)}


def multihost_port(steps=4):
  """multihost_train's `p_train_step(state, batch)`: a file that joins
  `jax.distributed`, whose `--global` sets its mesh after the join."""
  from tests.rewrite_inputs import multihost_train  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  return compare.Port(
      name="multihost", port_step=None, batches=_multihost_batch,
      steps=steps,
      init=lambda: multihost_train.create_train_state(jax.random.key(0)),
      pmap_step=multihost_train.p_train_step,
      mesh=jax.make_mesh((8,), ("batch",)))
