"""Compares two pytrees of numpy arrays: max abs, rel and ULP, and a verdict.

Use it on your own port: fetch both states to host (`to_host`), then
`compare_trees(port, reference, tolerance)`. Bitwise means the same bit
patterns, so two runs that blew up into identical NaNs are still bitwise.
"""

import jax
import numpy as np

from shardport.strategies import tolerances

BITWISE, CLOSE, DIFFER = "bitwise", "close", "differ"


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """How many representable floats lie between `a` and `b`, elementwise."""
  if not np.issubdtype(a.dtype, np.floating):
    return np.abs(a.astype(np.int64) - b.astype(np.int64))
  ints = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
  def ordered(x):
    # Floats are sign-magnitude; map them onto a monotonic integer line.
    i = x.view(ints).astype(np.int64)
    return np.where(i < 0, np.iinfo(ints).min - i, i)
  return np.abs(ordered(a) - ordered(b))


# Elements compared at a time: a whole-leaf comparison would hold a
# temporary as large as the leaf (issue 57: a proof's memory is the
# programs' plus a little).
CHUNK = 1 << 20
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def same_bits(a, b) -> bool:
  """Whether two arrays hold the same bit patterns (NaNs included)."""
  if a is b:
    return True
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape or a.dtype != b.dtype:
    return False
  ints = _UNSIGNED.get(a.dtype.itemsize)
  # A leaf of a chunk or less whole: its copy is no larger than a chunk's
  # temporary, and bytes compare faster than views (issue 57).
  if ints is None or a.size <= CHUNK:  # complex128, structured: whole too
    return (np.ascontiguousarray(a).tobytes()
            == np.ascontiguousarray(b).tobytes())
  a, b = (np.ascontiguousarray(x).reshape(-1).view(ints) for x in (a, b))
  return all(np.array_equal(a[i:i + CHUNK], b[i:i + CHUNK])
             for i in range(0, a.size, CHUNK))


def _leaf_stats(a, b, tol):
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape:
    raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
  if same_bits(a, b):  # no float64 copies of a leaf that did not move
    return {"bitwise": True, "close": True, "max_abs": 0.0, "max_rel": 0.0,
            "max_ulp": 0}
  diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
  magnitude = np.abs(b.astype(np.float64))
  allowed = tol.atol * (magnitude.max(initial=0.0)) + tol.rtol * magnitude
  finite = np.isfinite(diff)
  return {
      "bitwise": False,
      "close": bool(np.all(finite) and np.all(diff <= allowed)),
      "max_abs": float(np.where(finite, diff, np.inf).max(initial=0.0)),
      "max_rel": float((diff / np.maximum(magnitude, 1e-30)).max(
          initial=0.0)) if np.all(finite) else float("inf"),
      "max_ulp": int(ulp_distance(a, b).max(initial=0)),
  }


def compare_trees(a, b, tol: tolerances.Tolerance) -> dict:
  """Compares pytree `a` against `b` (the side taken as ground truth).

  Args:
    a: a pytree of arrays.
    b: a pytree of the same structure; tolerances scale with its magnitudes.
    tol: the tolerance for `close`.

  Returns:
    `{"verdict", "max_abs", "max_rel", "max_ulp", "rtol", "atol", "worst"}`,
    where `worst` names the leaf with the largest abs difference.
  """
  a_leaves = jax.tree_util.tree_leaves_with_path(a)
  b_leaves = jax.tree.leaves(b)
  if len(a_leaves) != len(b_leaves):
    raise ValueError(f"trees differ: {len(a_leaves)} vs {len(b_leaves)} leaves")
  stats = [(jax.tree_util.keystr(path), _leaf_stats(x, y, tol))
           for (path, x), y in zip(a_leaves, b_leaves)]
  if all(s["bitwise"] for _, s in stats):
    verdict = BITWISE
  elif all(s["close"] for _, s in stats):
    verdict = CLOSE
  else:
    verdict = DIFFER
  worst = max(stats, key=lambda kv: kv[1]["max_abs"])[0] if stats else ""
  return {
      "verdict": verdict,
      "max_abs": max((s["max_abs"] for _, s in stats), default=0.0),
      "max_rel": max((s["max_rel"] for _, s in stats), default=0.0),
      "max_ulp": max((s["max_ulp"] for _, s in stats), default=0),
      "rtol": tol.rtol,
      "atol": tol.atol,
      "worst": worst,
  }


def compare_pairs(pairs, states, tol, start=None) -> dict:
  """Each pair `(a, b)` of `states`: `(compare_trees(a, b, tol), their
  update_errors from start)`, the errors None where `start` is None or the
  pair is bitwise (the first step's verdict, measured as it runs)."""
  measured = {}
  for a, b in pairs:
    stats = compare_trees(states[a], states[b], tol)
    measured[a, b] = (stats, None if start is None or stats["verdict"] ==
                      BITWISE else update_errors(states[a], states[b], start))
  return measured


# A leaf whose own update is smaller than this fraction of its collection's
# largest is judged against that fraction: a bias that barely moves must
# not turn rounding into a large relative error.
UPDATE_FLOOR = 1e-3
# A sign-like update (Lion's, signSGD's, Adam's first) moves an element by
# its whole size either way where its input lies within rounding of zero:
# two programs that sum in other orders part there by twice the update, at
# scattered elements and steps (Lion on tests/sign_like_ports.py, 285k
# parameters, 50 steps: one element at 5 steps between pmap and the
# one-device reference, and the calibration's own at 3). Elements whose two
# updates point opposite ways, up to this share of a leaf, are left out of
# its error and counted: a mistake moves the elements alike (a 1% update
# turns none), and the moments such an optimiser keeps (continuous in the
# gradient) still carry a gradient's mistake. In a leaf of
# `SIGN_FLIP_ONE_IN` elements or more, one element at least (Lion flipped one
# of a 512-wide bias at step 35 there); in a smaller leaf (a 10-wide bias, a
# scalar) none.
SIGN_FLIP_SHARE = 1e-3
SIGN_FLIP_ONE_IN = 100


def update_errors(a, b, start, sign_flips=None) -> dict[str, float]:
  """How far apart two results of one step from `start` are, leaf by leaf,
  as a fraction of the step's update `b - start`, so that each leaf can be
  judged against its own band (`compare._src.prove.leaf_bands`).

  Each floating leaf's largest |a - b| is divided by its largest |b - start|
  (floored at `UPDATE_FLOOR` times the largest update in its top-level
  collection, e.g. `params` or `opt_state`); any other leaf (a step counter)
  must be equal. Scaling by the update, not the state, makes one number mean
  the same at step 1 and step 1000: a 1% change of the update is 1e-2.

  Args:
    a: a host pytree, one step's result.
    b: the same step's result taken as ground truth, same structure.
    start: the state both steps started from (may hold more collections).
    sign_flips: a dict given, `{leaf: count}` of the elements left out as
      sign flips (`SIGN_FLIP_SHARE`) is written into it.

  Returns:
    `{leaf path and shape: ratio}` for every leaf whose bits differ (empty
    where all are equal; inf where a non-float leaf or a non-finite value
    differs), e.g. `{"['params']['Dense_0']['kernel'] (64, 10)": 2e-6}`.
  """
  if trees_same_bits(a, b):
    return {}
  errors = {}
  for key in b:
    pairs = [(f"[{key!r}]" + jax.tree_util.keystr(path), x, y, s)
             for (path, x), y, s in zip(
                 jax.tree_util.tree_leaves_with_path(a[key]),
                 jax.tree.leaves(b[key]), jax.tree.leaves(start[key]))]
    updates = [_update(y, s) for _, _, y, s in pairs]
    largest = max(updates, default=0.0)
    for (path, x, y, s), update in zip(pairs, updates):
      x, y = np.asarray(x), np.asarray(y)
      if same_bits(x, y):
        continue
      named = f"{path} {tuple(y.shape)}"
      if not np.issubdtype(y.dtype, np.floating):
        errors[named] = float("inf")
        continue
      diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
      flipped = _sign_flips(x, y, s)
      if flipped is not None:
        diff[flipped] = 0.0
        if sign_flips is not None:
          sign_flips[named] = int(np.count_nonzero(flipped))
      diff = diff.max(initial=0.0)
      scale = max(update, UPDATE_FLOOR * largest, np.finfo(np.float64).tiny)
      errors[named] = (float(diff / scale) if np.isfinite(diff)
                       else float("inf"))
  return errors


def _sign_flips(x, y, start):
  """The mask of the elements whose updates from `start` point opposite
  ways in `x` and `y`, where they are some and at most `SIGN_FLIP_SHARE` of
  the leaf (or one, `SIGN_FLIP_ONE_IN`); None elsewhere."""
  start = np.asarray(start, np.float64)
  flipped = (x - start) * (y - start) < 0
  count = int(np.count_nonzero(flipped))
  allowed = max(SIGN_FLIP_SHARE * x.size, x.size >= SIGN_FLIP_ONE_IN)
  return flipped if 0 < count <= allowed else None


def _update(after, before) -> float:
  after = np.asarray(after)
  if not np.issubdtype(after.dtype, np.floating):
    return 0.0
  return float(np.abs(after.astype(np.float64)
                      - np.asarray(before, np.float64)).max(initial=0.0))


def metric_gaps(a: dict, b: dict) -> dict[str, list[float]]:
  """Each metric both steps report: `[its largest |a - b|, the largest
  |b|]` (`[0.0, ...]` for equal bits; inf where non-finite or shapes
  differ). A metric may be a scalar or an array (one value per member)."""
  gaps = {}
  for key in sorted(set(a) & set(b)):
    x, y = np.asarray(a[key], np.float64), np.asarray(b[key], np.float64)
    scale = float(np.abs(y).max(initial=0.0))
    if same_bits(np.asarray(a[key]), np.asarray(b[key])):
      gaps[key] = [0.0, scale]
    elif x.shape != y.shape:
      gaps[key] = [float("inf"), scale]
    else:
      diff = float(np.abs(x - y).max(initial=0.0))
      gaps[key] = [diff if np.isfinite(diff) else float("inf"), scale]
  return gaps


def relative_gap(gap: list[float]) -> float:
  """A `metric_gaps` entry as a fraction of the metric's magnitude."""
  diff, scale = gap
  return diff / max(scale, np.finfo(np.float64).tiny) if diff else 0.0


def trees_same_bits(a, b) -> bool:
  """Whether two pytrees of the same structure hold the same bits."""
  return a is b or all(same_bits(np.asarray(x), np.asarray(y))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def max_abs_difference(a, b) -> float:
  """The largest elementwise |a - b| over two pytrees (for drift curves).

  Non-finite differences count as infinite; equal bits count as zero.
  """
  def leaf(x, y):
    if same_bits(np.asarray(x), np.asarray(y)):
      return 0.0
    diff = np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))
    return float(np.where(np.isfinite(diff), diff, np.inf).max(initial=0.0))
  return max(jax.tree.leaves(jax.tree.map(leaf, a, b)), default=0.0)


def all_finite(tree) -> bool:
  """Whether every floating leaf of a host pytree is finite."""
  return all(np.all(np.isfinite(x)) for x in jax.tree.leaves(tree)
             if np.issubdtype(np.asarray(x).dtype, np.floating))
