"""What a checkpoint says about the run that wrote it, and whether this run
may continue from it.

Every checkpoint's `run` item is a run record (`run_record`): the strategy
and config, the backend and device count that wrote it. A run continues only
from a record of the same run (`check_same_run`): the same strategy, or one
the program names in `restores` (the same state in the same layout), and
the same config but for what `MAY_DIFFER`. A checkpoint this run must
not continue from raises `CheckpointError`; one that cannot be read as this
program's state, `DamagedCheckpoint` (the caller falls back to an older
one).
"""

import dataclasses
import json

import jax

# Config fields a resumed run may change: how long it runs and how its
# loops are written, not what it computes.
MAY_DIFFER = ("steps", "epochs", "member_loop", "accum_loop")


class CheckpointError(ValueError):
  """A checkpoint that this run must not continue from (exit 2)."""


class DamagedCheckpoint(ValueError):
  """A step that cannot be read as this program's state; `why` says how."""

  def __init__(self, step: int, why: str):
    super().__init__(f"checkpoint step {step} is damaged ({why})")
    self.why = why


def run_record(strategy: str, config, backend: str, n_devices: int,
               restores: tuple[str, ...] = ()) -> dict:
  """What a checkpoint says about the run that wrote it (JSON-ready).

  `restores`: other strategies whose checkpoints this run resumes (kept in
  the run's own record, for `check_same_run`).
  """
  return {"strategy": strategy, "restores": list(restores),
          "config": json.loads(json.dumps(dataclasses.asdict(config))),
          "backend": backend, "devices": n_devices,
          "processes": jax.process_count()}


def check_same_run(saved: dict, current: dict, step: int) -> None:
  """Raises CheckpointError naming the first setting that differs."""
  strategy = saved.get("strategy")
  if strategy in current.get("restores", ()):
    strategy = current["strategy"]  # the same state in the same layout
  pairs = [("strategy", strategy, current["strategy"])]
  # In the config's own order (workload first), then fields only saved.
  fields = [*current["config"],
            *(k for k in saved["config"] if k not in current["config"])]
  pairs += [(name, saved["config"].get(name), current["config"].get(name))
            for name in fields if name not in MAY_DIFFER]
  for name, there, here in pairs:
    if there != here:
      raise CheckpointError(
          f"the checkpoint at step {step} is of another run: {name} "
          f"{there!r} there, {here!r} here")
