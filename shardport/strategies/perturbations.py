"""What the calibration runs change: summation order only, two ways.

A calibration run is the ground truth trained again with one change that
moves only float rounding, so that its drift from the ground truth shows how
far rounding alone separates two correct runs. `RowOrder` reorders each
batch's rows (our strategies: a sum over the rows is all a row's place
changes). `BatchNudge` moves every float of each batch by one ulp, up or
down, and keeps the rows in place: for a team's program, where a row's place
may pick its dropout mask or its device, so that reordering would change
more than rounding (`StateNudge` where the batches hold no floats).
"""

import dataclasses

import jax
import numpy as np

_INTS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def permuted(host_batch, parts, step, seed=0):
  """The batch with each of its `parts` contiguous slices' rows shuffled.

  Where the rows do not divide into `parts` (an ensemble's batch need not
  split over all the devices) the slices are `n // parts` rows (at least
  one) and the last holds the rest.
  """
  n = len(next(iter(host_batch.values())))
  rng = np.random.default_rng(step if seed == 0 else (seed, step))
  size = max(1, n // parts)
  order = np.concatenate([start + rng.permutation(min(size, n - start))
                          for start in range(0, n, size)])
  return {k: v[order] for k, v in host_batch.items()}


@dataclasses.dataclass(frozen=True)
class RowOrder:
  """The batch's rows shuffled, within each device's slice or across it."""

  within: str  # "slices" or "batch"
  seed: int

  def describe(self) -> str:
    where = ("within each device's slice" if self.within == "slices" else
             "across the whole batch")
    return (f"the reference's batch rows shuffled {where}, shuffle seed "
            f"{self.seed}")

  def batch(self, host_batch, step: int, n_devices: int):
    parts = n_devices if self.within == "slices" else 1
    return permuted(host_batch, parts, step, self.seed)

  def state(self, state):
    return state


def nudged(x: np.ndarray, seed: int) -> np.ndarray:
  """Every float of `x` moved one ulp up or down, the way chosen by a hash
  of its own bits and `seed`: equal values move alike, so that copies of a
  replicated value stay copies."""
  x = np.asarray(x)
  if not np.issubdtype(x.dtype, np.floating):
    return x
  bits = x.view(_INTS[x.dtype.itemsize]).astype(np.uint64)
  mixed = ((bits ^ np.uint64(seed * 0x9E3779B9 & 0xFFFFFFFF))
           * np.uint64(0x9E3779B1)) & np.uint64(0xFFFFFFFF)
  up = (mixed >> np.uint64(31)).astype(bool)
  return np.nextafter(x, np.where(up, np.inf, -np.inf).astype(x.dtype))


def nudged_by(host_batch, ulps: int, seed):
  """The batch with every float moved `ulps` ulps, up or down at random
  (`seed`), each by its own ulp (zeros stay zero)."""
  rng = np.random.default_rng(seed)

  def nudge(x):
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
      return x
    signs = rng.integers(0, 2, x.shape) * 2 - 1
    moved = (x + signs * ulps * np.spacing(x)).astype(x.dtype)
    return np.where(x == 0, x, moved)

  return jax.tree.map(nudge, host_batch)


def has_floats(tree) -> bool:
  """Whether any leaf of a host tree is floating point."""
  return any(np.issubdtype(np.asarray(x).dtype, np.floating)
             for x in jax.tree.leaves(tree))


@dataclasses.dataclass(frozen=True)
class BatchNudge:
  """Every float of each batch moved by one ulp; the state as it is.

  The step computes its update from inputs that moved at the size of
  rounding; nothing is carried to the next step but what the update made
  of it.
  """

  seed: int

  def describe(self) -> str:
    return ("every float of each batch moved one ulp up or down (nudge "
            f"seed {self.seed})")

  def batch(self, host_batch, step: int, n_devices: int):
    del n_devices
    return jax.tree.map(lambda x: nudged(x, self.seed * 100003 + step),
                        host_batch)

  def state(self, state):
    return state


@dataclasses.dataclass(frozen=True)
class StateNudge:
  """Every float of the state moved by one ulp; the batch as it is (for
  batches with no floats, e.g. token ids).

  The nudge is carried from step to step: one ulp of every parameter,
  however small its update, so the band is wider than `BatchNudge`'s.
  """

  seed: int

  def describe(self) -> str:
    return ("every float of the initial state moved one ulp up or down "
            f"(nudge seed {self.seed})")

  def batch(self, host_batch, step: int, n_devices: int):
    del step, n_devices
    return host_batch

  def state(self, state):
    """`state` (on devices) nudged, each leaf kept on its own sharding."""
    return jax.tree.map(lambda x: jax.device_put(
        nudged(jax.device_get(x), self.seed), x.sharding)
        if np.issubdtype(x.dtype, np.floating) else x, state)


CALIBRATION = "calibration"
# Our strategies' calibration runs (`Strategy.calibrations`): name -> rows
# shuffled within each device's slice or across the whole batch, with a
# shuffle seed. Rounding separates runs chaotically:
# where a model only fits noise (random labels), a ReLU that flips in one
# run and not in another makes the drift jump at a random step, and one
# calibration run may see no such jump where a correct port does (measured
# on `--dataset synthetic:28x28`, 30 steps: a false fail). The band is the
# largest drift of three, of two kinds.
CALIBRATIONS = {
    CALIBRATION: RowOrder("slices", 0),
    f"{CALIBRATION}_batch": RowOrder("batch", 0),
    f"{CALIBRATION}_seed1": RowOrder("slices", 1)}
