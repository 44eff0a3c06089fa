"""The runs' states as the engine reads them: on their devices, leaf by leaf.

The prover reads every run's state after each step (`runner._step`) to
compare them bit for bit. A run whose module has `host_view` (a `Port`'s)
is read from its devices one leaf at a time, as each comparison asks
(`DeviceLeaf`): no host copy of its state is made, and no device copy but
its own first one is kept. The one host copy a proof keeps is the shared
state (`kept`): the truth's state before a checked step, which its own step
may donate (issue 57: at most one host copy of the state at a time,
compared leaf by leaf). A module without one (our strategies') hands the
engine numpy copies (`to_host`); runs that agree bitwise share one.
"""

import jax
from jax.experimental import multihost_utils
import numpy as np

from compare._src.prove import equivalence


class DeviceLeaf:
  """One leaf of a run's state, left on one device and read as numpy when
  a comparison asks (`np.asarray`).

  It holds the first device's buffer alone (the other devices' copies go
  with the state), which a donating step may still donate: read after the
  run's next step, it raises jax's `Array has been deleted`. On XLA:CPU the
  read is a view of the buffer, gone with the comparison that made it (jax
  0.10.2 keeps no such view). On an accelerator the read is a copy, which
  jax keeps with the buffer's array (`jax.Array` caches what it fetched)
  until the state is let go: one host copy per state read, not measured
  here (no accelerator).
  """

  __slots__ = ("array", "stacked")

  def __init__(self, array: jax.Array, stacked: bool):
    self.array, self.stacked = array, stacked

  @property
  def shape(self) -> tuple:
    return self.array.shape[1:] if self.stacked else self.array.shape

  @property
  def dtype(self):
    return self.array.dtype

  @property
  def ndim(self) -> int:
    return len(self.shape)

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  def __array__(self, dtype=None, copy=None):
    value = np.asarray(self.array)
    value = value[0, ...] if self.stacked else value  # an array, 0-d too
    if copy:
      return np.array(value, dtype=dtype)
    return value if dtype is None else value.astype(dtype, copy=False)

  def __repr__(self):
    return f"DeviceLeaf({self.dtype}{list(self.shape)})"


def device_leaf(x, stacked: bool = False):
  """`x` (one leaf of a run's state) as a `DeviceLeaf` on its first
  addressable device: a fully replicated array's whole value there, a
  stacked (pmap) one's first row; any other leaf (sharded, or not on a
  device) as a numpy copy."""
  if not isinstance(x, jax.Array):
    return np.array(x)[0] if stacked else np.array(x)
  if stacked:
    return DeviceLeaf(x.addressable_shards[0].data, True)
  if x.is_fully_replicated:
    return DeviceLeaf(x.addressable_shards[0].data, False)
  return fetch(x)


def fetch(x):
  """`x` as numpy: a leaf split over many processes (a port's FSDP state)
  gathered from all of them, so every process must fetch it alike."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable and (
      not x.is_fully_replicated):
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
  return np.array(x)


def of(module, state):
  """`state` as the engine reads it: its module's `host_view` (leaves
  read from the devices as compared), else its `to_host` (numpy copies)."""
  view = getattr(module, "host_view", None)
  return view(state) if view is not None else module.to_host(state)


def read(host):
  """A state from `of` as numpy: each device leaf read (on XLA:CPU a view,
  no copy), every other leaf as it is (to place it, `placement.place`)."""
  return jax.tree.map(
      lambda x: np.asarray(x) if isinstance(x, DeviceLeaf) else x, host)


def kept(host):
  """A state from `of` that must outlive its run's next step (the shared
  state): its device leaves copied to the host, its numpy leaves (already
  copies of their own) as they are: a state with none, itself."""
  if not any(isinstance(x, DeviceLeaf) for x in jax.tree.leaves(host)):
    return host
  return jax.tree.map(
      lambda x: np.array(x) if isinstance(x, DeviceLeaf) else x, host)


def leaf_names(state) -> list[str]:
  """Every array leaf of a host state, by the name `update_errors` gives it
  (its path and shape)."""
  return [f"[{key!r}]" + jax.tree_util.keystr(path) + f" {tuple(np.shape(x))}"
          for key in state
          for path, x in jax.tree_util.tree_leaves_with_path(state[key])]


def same_as_one_of(host, others):
  """`host`, or the first of `others` that holds its bits: runs that agree
  bitwise (a port and pmap) share one state to compare (and, from
  `to_host`, one host copy)."""
  return next((other for other in others
               if equivalence.trees_same_bits(host, other)), host)
