"""`python -m sharded.train` with every checkpoint save watched, per worker.

`python -m tests.fsdp_save_probe ARGS --processes P --devices D` runs the
training job `python -m sharded.train ARGS ...` would, each of its P workers
running this module, and each worker appends one line per save to
`WORKDIR/probe-<process>.jsonl`: every leaf of the `state` item the save
hands Orbax (`leaves`: its path, type, global shape and bytes, whether
this process holds all of it, the bytes this process holds) and the bytes
`multihost_utils.process_allgather` brought to this host while the save ran
(`gathered`; the gather the fsdp checkpoint once made of the whole state).
"""

import json
import os
import sys

from sharded import train
from shardport.launch import emulation

MODULE = "tests.fsdp_save_probe"


def _value(argv, flag):
  return argv[argv.index(flag) + 1]


def _watch(workdir):
  """Wraps `checkpoints.save` (the loop calls it through the module)."""
  # Imported here: jax starts only once the emulated devices are set.
  # pylint: disable=g-import-not-at-top
  import jax
  from jax.experimental import multihost_utils
  import numpy as np
  from shardport.training import checkpoints
  # pylint: enable=g-import-not-at-top

  original, gather = checkpoints.save, multihost_utils.process_allgather
  gathered = []

  def counting_gather(tree, *args, **kwargs):
    out = gather(tree, *args, **kwargs)
    gathered.extend(np.asarray(x).nbytes for x in jax.tree.leaves(out))
    return out

  def leaf(path, x):
    local = (sum(s.data.nbytes for s in x.addressable_shards
                 if s.replica_id == 0) if isinstance(x, jax.Array)
             else np.asarray(x).nbytes)
    return {"path": jax.tree_util.keystr(path), "type": type(x).__name__,
            "jax_array": isinstance(x, jax.Array), "shape": list(x.shape),
            "bytes": int(x.nbytes),
            "fully_addressable": (not isinstance(x, jax.Array)
                                  or x.is_fully_addressable),
            "local_bytes": int(local)}

  def save(manager, step, state, layout, record):
    handed = {}
    real = manager.save

    def spy(step, args):
      handed["leaves"] = [leaf(p, x) for p, x in
                          jax.tree_util.tree_leaves_with_path(
                              args[checkpoints.STATE].item)]
      return real(step, args=args)

    gathered.clear()
    manager.save, multihost_utils.process_allgather = spy, counting_gather
    try:
      blocked = original(manager, step, state, layout, record)
    finally:
      del manager.save
      multihost_utils.process_allgather = gather
    path = os.path.join(workdir, f"probe-{jax.process_index()}.jsonl")
    with open(path, "a") as f:
      f.write(json.dumps({"step": step, **handed,
                          "gathered": sum(gathered)}) + "\n")
    return blocked

  checkpoints.save = save


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  if "--processes" in argv:  # the launcher: each worker runs this module
    from shardport.launch import launcher  # pylint: disable=g-import-not-at-top
    return launcher.launch("train", MODULE, argv,
                           int(_value(argv, "--processes")),
                           int(_value(argv, "--devices")), normal=(0, 2))
  emulation.set_cpu_device_count(emulation.devices_from_argv(argv))
  _watch(_value(argv, "--workdir"))
  from shardport.training import cli  # pylint: disable=g-import-not-at-top
  return cli.main(train.BACKEND, argv)


if __name__ == "__main__":
  sys.exit(main())
