"""One string for a whole training state: a sha256 over its host arrays.

Two runs, backends, process layouts or machines that hold the same bits get
the same digest, whatever their placement, so a digest compares runs that
never met. It hashes the canonical host layout (`to_host`: every field of the
train state, `shardport.workloads.canonical`; no device axis for replicated state, a
leading member axis for ensembles).
"""

import hashlib

import jax
import numpy as np

# Version 2 hashes the whole state `to_host` gives (params, optimiser state,
# step and any other collection). Version 1 hashed `params` and `opt_state`
# only: checkpoints written then record no version and are checked by it.
VERSION = 2
VERSIONS = (1, 2)
_VERSION_1_FIELDS = ("params", "opt_state")


def state_digest(host_state, version: int = VERSION) -> str:
  """The sha256 of a pytree of host arrays, in a fixed leaf order.

  Every leaf contributes its path, dtype, shape and raw bytes, so states that
  differ only in a dtype or a shape (same bytes) still get different digests.

  Args:
    host_state: a pytree of numpy arrays or scalars (e.g. a backend's
      `to_host`: `{"params", "opt_state", "step", ...}`).
    version: the definition to compute (`VERSIONS`); version 1 takes only
      the `params` and `opt_state` of `host_state`.

  Returns:
    The hex digest, 64 characters.

  Raises:
    ValueError: a version not in `VERSIONS`.
  """
  return streamed_digest(jax.tree.map(np.asarray, host_state),
                         lambda array: (np.ascontiguousarray(array),), version)


def streamed_digest(state, read, version: int = VERSION) -> str:
  """`state_digest` of a state no host holds whole, read a block at a time.

  The same digest as `state_digest` of the host copy of `state`: the bytes
  are hashed in the same order, only never all in memory at once (a state
  sharded over processes: a placement's own `state_digest`).

  Args:
    state: a pytree of arrays that have a `shape` and a `dtype` (global
      `jax.Array`s), in the tree `state_digest` would take once on the host.
    read: a leaf's bytes in C order, as an iterable of contiguous numpy
      arrays (blocks), called once per leaf in the digest's leaf order.
    version: as for `state_digest`.

  Returns:
    The hex digest, 64 characters.

  Raises:
    ValueError: a version not in `VERSIONS`.
  """
  if version not in VERSIONS:
    raise ValueError(f"unknown digest version {version}; this program knows "
                     f"{', '.join(map(str, VERSIONS))}")
  if version == 1:
    state = {k: state[k] for k in _VERSION_1_FIELDS}
  digest = hashlib.sha256()
  leaves = jax.tree_util.tree_leaves_with_path(state)
  for path, leaf in sorted(leaves, key=lambda kv: jax.tree_util.keystr(kv[0])):
    digest.update(jax.tree_util.keystr(path).encode())
    # A scalar's shape is hashed as (1,): `np.ascontiguousarray` made it
    # one-dimensional when digests were defined, and they must not change.
    shape = tuple(leaf.shape) or (1,)
    digest.update(f"|{np.dtype(leaf.dtype).str}|{shape}|".encode())
    for block in read(leaf):
      digest.update(np.ascontiguousarray(block).reshape(-1).view(np.uint8))
  return digest.hexdigest()
