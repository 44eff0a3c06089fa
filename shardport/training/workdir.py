"""The training programs' workdir: writable, roomy enough, metrics rewound.

Checked before anything compiles (exit 2 when the workdir cannot hold the
run), and on resume the metrics log is cut back to the restored step.
"""

import json
import os
import shutil
import tempfile

import jax
import numpy as np

from shardport.launch import files
from shardport.training import checkpoints


class WorkdirError(ValueError):
  """A workdir that cannot hold the run (exit 2)."""


def check_workdir(workdir):
  """Raises WorkdirError unless files can be created and written in it."""
  try:
    os.makedirs(workdir, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=workdir, prefix=".probe") as probe:
      probe.write(b"\0" * 65536)
      probe.flush()
      os.fsync(probe.fileno())
  except OSError as err:
    raise WorkdirError(f"--workdir {workdir}: {err.strerror or err}") from None


def check_space(job, like):
  """Raises WorkdirError when the disk cannot hold the checkpoints kept."""
  targets = job.layout.placement.checkpoint_target(
      checkpoints.saved_fields(like))
  size = sum(np.prod(t.shape) * t.dtype.itemsize
             for t in jax.tree.leaves(targets))
  needed = (job.schedule.max_to_keep + 1) * size + 2**20
  free = shutil.disk_usage(job.workdir).free
  if free < needed:
    raise WorkdirError(f"--workdir {job.workdir} has {free / 2**20:.1f} MiB "
                       f"free; {job.schedule.max_to_keep} checkpoints need "
                       f"about {needed / 2**20:.1f} MiB")


def rewind_metrics(path, step):
  """Drops the lines a killed run logged past `step` (and any torn line)."""
  if not os.path.exists(path):
    return
  kept = []
  with open(path) as f:
    for line in f:
      try:
        if json.loads(line)["step"] <= step:
          kept.append(line)
      except (ValueError, KeyError):
        continue
  with files.replaced_atomically(path) as partial:
    with open(partial, "w") as f:
      f.writelines(kept)
