"""Reading a checkpoint a classic pmap program wrote: one copy per device.

A classic program saved its replicated state without `unreplicate`, so
every leaf has a leading device axis. `checkpoints` asks `replica_count`
whether a step is so saved, reads it onto `stacked_target` (every replica
on one device), and keeps one copy with `collapse_replicas`, which first
checks that the copies agree.
"""

import jax
import numpy as np

from shardport.training.run_records import CheckpointError
from shardport.training.run_records import DamagedCheckpoint


def replica_count(metadata, target, step: int) -> int:
  """The replica count if every leaf was saved with a leading device axis.

  Args:
    metadata: the saved `state` item's array metadata (Orbax's
      `item_metadata`).
    target: the state this program restores into (shapes and shardings).
    step: the checkpoint's step, for the error.

  Returns:
    0 where the arrays have the target's own shapes, else the length of
    their common leading axis.

  Raises:
    DamagedCheckpoint: the array metadata is gone, or the arrays are not
      this program's state (another count, or shapes that are neither the
      state's nor the state's with one device axis).
  """
  saved = [tuple(m.shape) for m in jax.tree.leaves(metadata)]
  paths, wanted = zip(*[(jax.tree_util.keystr(p), tuple(t.shape)) for p, t
                        in jax.tree_util.tree_leaves_with_path(target)])
  if not saved:
    # Orbax reads a step whose state/_METADATA is gone as an empty item.
    raise DamagedCheckpoint(step, "its array metadata, state/_METADATA, is "
                            "missing or unreadable")
  if len(saved) != len(wanted):
    raise DamagedCheckpoint(step, f"it holds {len(saved)} arrays, this "
                            f"program's state {len(wanted)}")
  if tuple(saved) == wanted:
    return 0
  replicas = {s[0] for s, w in zip(saved, wanted) if s[1:] == w}
  if len(replicas) == 1 and all(s[1:] == w for s, w in zip(saved, wanted)):
    return replicas.pop()
  path, there, here = next(
      ((p, s, w) for p, s, w in zip(paths, saved, wanted)
       if w not in (s, s[1:])), ("", None, None))
  raise DamagedCheckpoint(step, f"its array {path} has shape {there}, this "
                          f"program's {here}" if path else "its arrays are "
                          "neither this program's shapes nor those with one "
                          "device axis")


def stacked_target(target, replicas: int):
  """`target` with a leading axis of `replicas`, all on one local device:
  every saved copy is read, to be checked against the others."""
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.tree.map(lambda t: jax.ShapeDtypeStruct(
      (replicas, *t.shape), t.dtype, sharding=device), target)


def collapse_replicas(tree, step: int):
  """One copy of a tree saved with a device axis; its replicas must agree.

  Replicas that differ are fatal, not damage: the files read back whole
  (damaged files fail to read or fail the digest), so the classic program
  that wrote them let its replicas drift apart. That is a bug in the
  writer, which its older checkpoints share: falling back would hide it.
  """
  def collapse(path, x):
    x = np.asarray(x)
    for i in range(1, len(x)):
      if x[i].tobytes() != x[0].tobytes():
        raise CheckpointError(
            f"the checkpoint at step {step} holds one copy per device and "
            f"they differ: {jax.tree_util.keystr(path)} replica {i} is not "
            "replica 0")
    return x[0]
  return jax.tree_util.tree_map_with_path(collapse, tree)
