"""One string for a whole training state: a sha256 over its host arrays.

Two runs, backends, process layouts or machines that hold the same bits get
the same digest, whatever their placement, so a digest compares runs that
never met. It hashes the canonical host layout (`to_host`: no device axis for
replicated state, a leading member axis for ensembles).
"""

import hashlib

import jax
import numpy as np


def state_digest(host_state) -> str:
  """The sha256 of a pytree of host arrays, in a fixed leaf order.

  Every leaf contributes its path, dtype, shape and raw bytes, so states that
  differ only in a dtype or a shape (same bytes) still get different digests.

  Args:
    host_state: a pytree of numpy arrays or scalars (e.g.
      `{"params", "opt_state"}` from a backend's `to_host`).

  Returns:
    The hex digest, 64 characters.
  """
  digest = hashlib.sha256()
  leaves = jax.tree_util.tree_leaves_with_path(host_state)
  for path, leaf in sorted(leaves, key=lambda kv: jax.tree_util.keystr(kv[0])):
    array = np.ascontiguousarray(np.asarray(leaf))
    digest.update(jax.tree_util.keystr(path).encode())
    digest.update(f"|{array.dtype.str}|{array.shape}|".encode())
    digest.update(array.tobytes())
  return digest.hexdigest()
