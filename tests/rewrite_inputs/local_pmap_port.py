"""The team's Port of tests/rewrite_inputs/local_pmap_train.py's step: its
pmap lives inside `main`, so the Port maps the file's `train_step` as that
line does, and `--prove` proves the rewritten file's port of it."""

import functools

import jax
import numpy as np

import compare
from tests.rewrite_inputs import local_pmap_train


def batches(i):
  x = np.random.default_rng(i).normal(size=(64, 3)).astype(np.float32)
  return {"x": x, "y": x @ np.float32([1, -2, 3])}


def port(steps=4):
  step = functools.partial(local_pmap_train.train_step, learning_rate=0.1,
                           dropout_rng=jax.random.key(1))
  return compare.Port(
      name="local_pmap", port_step=None, batches=batches, steps=steps,
      init=lambda: {"w": np.zeros(3, np.float32), "b": np.float32(0)},
      pmap_step=jax.pmap(step, axis_name="batch", donate_argnums=(0,)),
      mesh=jax.make_mesh((8,), ("batch",)))
