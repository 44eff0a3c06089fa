"""The host copies of the runs' states: one per distinct state.

The prover fetches every run's state after each step (`runner._step`) to
compare them bit for bit. A port that is right is bitwise pmap's, so the
runs that agree share one copy (issue 57: at most one host copy of a state
at a time where the runs agree).
"""

import jax
import numpy as np

from compare._src.prove import equivalence


def leaf_names(state) -> list[str]:
  """Every array leaf of a host state, by the name `update_errors` gives it
  (its path and shape)."""
  return [f"[{key!r}]" + jax.tree_util.keystr(path) + f" {tuple(np.shape(x))}"
          for key in state
          for path, x in jax.tree_util.tree_leaves_with_path(state[key])]


def same_as_one_of(host, others):
  """`host`, or the first of `others` that holds its bits: runs that agree
  bitwise (a port and pmap) share one host copy."""
  return next((other for other in others
               if equivalence.trees_same_bits(host, other)), host)
