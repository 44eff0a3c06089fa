"""What the trap examples share: the outcome, meshes, counting, timing, CNNs.

`docs/traps.py` (the traps that give wrong numbers) and
`docs/traps_compiler.py` (the traps in what the compiler makes of a port)
build on these.
"""

import dataclasses
import time
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax
from jax.sharding import AxisType

N = 8  # devices every trap runs on


@dataclasses.dataclass
class Outcome:
  """What one trap shows."""

  wrong: Any
  right: Any
  expected: Any
  facts: dict = dataclasses.field(default_factory=dict)


def auto_mesh(axis="data", n=N):
  return jax.make_mesh((n,), (axis,), axis_types=(AxisType.Auto,))


def compile_counted(jitted, *args):
  """`jitted` compiled for `args`, and the collectives one call executes."""
  from compare._src.measure import hlo  # pylint: disable=g-import-not-at-top
  compiled = jitted.lower(*args).compile()
  return compiled, hlo.collectives_executed(compiled.as_text())


def collectives(jitted, *args):
  """Collectives one call of `jitted(*args)` executes (loops' trips in)."""
  return compile_counted(jitted, *args)[1]


def data(rng, batch=64, features=3):
  x = rng.normal(size=(batch, features)).astype(np.float32)
  y = rng.normal(size=(batch,)).astype(np.float32)
  return x, y


def timed(fn, *args, repeats=10):
  jax.block_until_ready(fn(*args))
  start = time.perf_counter()
  for _ in range(repeats):
    jax.block_until_ready(fn(*args))
  return (time.perf_counter() - start) / repeats


class TwoConv(nn.Module):
  """The smallest CNN that shows the trap: a conv whose input needs a grad."""

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(4, (3, 3))(x))
    x = nn.relu(nn.Conv(4, (3, 3))(x))
    return nn.Dense(10)(x.reshape(x.shape[0], -1))


def host_params(model, example, rng, members=None):
  """Random params for `model`, drawn with numpy.

  Compiling flax's init (threefry random bits) takes seconds on XLA:CPU; the
  traps need some params, not flax's initialisers. `members` stacks that many
  independent draws on a leading axis.
  """
  shapes = jax.eval_shape(model.init, jax.random.key(0), example)["params"]
  lead = () if members is None else (members,)
  return jax.tree.map(lambda s: (0.3 * rng.standard_normal(
      lead + s.shape)).astype(np.float32), shapes)


def sgd_step(model):
  def step(params, images, labels):
    grads = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
        model.apply({"params": p}, images), labels).mean())(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
  return step


class WiderConv(TwoConv):
  """TwoConv with 16 features: enough work for the scan slow path to show."""

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(16, (3, 3))(x))
    x = nn.relu(nn.Conv(16, (3, 3))(x))
    return nn.Dense(10)(x.reshape(x.shape[0], -1))
