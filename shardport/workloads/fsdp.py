"""The fsdp strategy's sharding rule, shared by both backends.

Rule: a leaf of the train state (params, optimiser state, any other array
field) is split over the N devices along its FIRST axis whose length is a
positive multiple of N; a leaf with no such axis (scalars such as `step`
or adam's `count`, a bias of 10 on 8 devices) stays replicated. Every
device then holds 1/N of each split leaf. With N = 1 every non-scalar leaf
is "split" into one piece, i.e. the whole leaf.
"""

import jax
from jax import lax

REPLICATED = -1


def shard_axis(shape, n: int) -> int:
  """The axis a leaf of `shape` is split along over `n` devices, or
  `REPLICATED` (-1) where no axis divides."""
  for i, size in enumerate(shape):
    if size >= n and size % n == 0:
      return i
  return REPLICATED


def shard_axes(tree, n: int):
  """`shard_axis` of every leaf of `tree` (arrays or shape structs)."""
  return jax.tree.map(lambda x: shard_axis(x.shape, n), tree)


def gather(params, axes, axis_name):
  """The full params from each device's shards (replicated leaves as they
  are)."""
  return jax.tree.map(lambda x, a: x if a == REPLICATED else
                      lax.all_gather(x, axis_name, axis=a, tiled=True),
                      params, axes)


def scatter_mean(grads, axes, axis_name, n):
  """Each device's shard of the mean gradient over devices (the mean itself
  for replicated leaves)."""
  return jax.tree.map(lambda g, a: lax.pmean(g, axis_name) if a == REPLICATED
                      else lax.psum_scatter(
                          g, axis_name, scatter_dimension=a, tiled=True) / n,
                      grads, axes)
