"""A checkpoint a pmap program wrote, restored into its port's state.

    raw = ocp.StandardCheckpointer().restore(path)  # no target: as saved
    state = compare.from_pmap_checkpoint(raw, like=port_initial_state)

A pmap-era checkpoint differs from the port's state three ways, each
undone leaf by leaf against `like` (the port's own initial state, which
brings the tree, the static fields and the shardings):

- a leading device axis: a state saved without `unreplicate` holds `[n,
  ...]` copies; they must agree bit for bit, and one is kept (copies that
  differ are refused, naming the leaf: a per-device value has no one copy);
- raw `uint32[2]` keys (`jax.random.PRNGKey`) where the port holds typed
  keys (`jax.random.key`): wrapped with `like`'s key implementation;
- containers as Orbax reads them back without a target (a NamedTuple such
  as `optax.MultiStepsState`, or a tuple, comes back as a dict or a list):
  each leaf is found by its path in `like`, so an `optax.MultiSteps` state
  saved mid-accumulation (`mini_step`, `acc_grads`) resumes where it was.

Every process reads the same checkpoint, so each leaf is placed with
`jax.device_put` on `like`'s sharding (which asserts the value is the same
on every process); a key's `uint32` data is placed first and wrapped there,
since a typed key wrapped on the host is an array on one device, which
`jax.device_put` refuses to spread over other processes' devices (jax
0.10.2, 2 processes: `tests/test_trainstate_port.py`). Nothing else is
changed: a leaf of another shape, or one missing, is refused with a
ValueError naming it.
"""

import jax
import numpy as np

__all__ = ["from_pmap_checkpoint"]


def _name(path) -> str:
  return jax.tree_util.keystr(path)


def _key(entry):
  """The dict key, attribute or index one path entry stands for."""
  for attr in ("key", "name", "idx"):
    if hasattr(entry, attr):
      return getattr(entry, attr)
  raise ValueError(f"an unsupported path entry {entry!r}")


def _lookup(saved, path):
  """The leaf of `saved` at `like`'s `path`, whatever container holds it."""
  node = saved
  for entry in path:
    key = _key(entry)
    if isinstance(node, dict):
      node = node[key] if key in node else node[str(key)]
    elif isinstance(node, (list, tuple)) and not hasattr(node, "_fields"):
      node = node[int(key)]
    elif isinstance(key, int) and hasattr(node, "_fields"):
      node = node[key]
    else:
      node = getattr(node, key)
  return node


def _one_copy(name: str, value: np.ndarray, shape: tuple) -> np.ndarray:
  """`value` of `shape`, or its one copy if it holds `[n, *shape]` copies."""
  if value.shape == shape:
    return value
  if value.ndim == len(shape) + 1 and value.shape[1:] == shape:
    if not all(np.array_equal(value[0], row, equal_nan=True)
               for row in value[1:]):
      raise ValueError(f"{name}: the {value.shape[0]} device copies differ; "
                       "a per-device value has no one copy to restore")
    return value[0]
  raise ValueError(f"{name}: saved shape {value.shape}, the port's is {shape} "
                   f"(or [devices, *{shape}])")


def _leaf(path, like, saved):
  """One leaf of `saved` as `like`'s: one copy, typed key, its sharding."""
  name = _name(path)
  try:
    value = np.asarray(_lookup(saved, path))
  except (KeyError, IndexError, AttributeError, TypeError) as err:
    raise ValueError(f"{name}: not in the checkpoint ({err!r})") from None
  is_key = jax.dtypes.issubdtype(like.dtype, jax.dtypes.prng_key)
  data = jax.random.key_data(like) if is_key else like
  value = _one_copy(name, value, tuple(data.shape))
  if value.dtype != data.dtype:
    raise ValueError(f"{name}: saved dtype {value.dtype}, the port's is "
                     f"{data.dtype}")
  sharding = getattr(data, "sharding", None)
  if sharding is not None:  # placed before a key is wrapped: see below
    value = jax.device_put(value, sharding)
  if is_key:
    value = jax.random.wrap_key_data(value, impl=jax.random.key_impl(like))
  return value


def from_pmap_checkpoint(saved, like):
  """`saved` (a pmap program's checkpoint, read back) as the port's state.

  Args:
    saved: the checkpoint's tree as read without a target (e.g.
      `ocp.StandardCheckpointer().restore(path)`, the case tested): nested
      dicts, lists or the original containers, leaves as saved (stacked
      `[n, ...]` or not, raw `uint32[2]` keys or typed).
    like: the port's state to restore into (e.g. its initial state): its
      tree, static fields (`apply_fn`, `tx`), dtypes, key types and
      shardings are kept; only its leaves' values are replaced.

  Returns:
    `like` with every leaf taken from `saved`, on `like`'s shardings.

  Raises:
    ValueError: a leaf is missing, of another shape or dtype, or its device
      copies differ (the message names the leaf).
  """
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: _leaf(path, leaf, saved), like)
