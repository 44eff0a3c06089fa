"""The training programs' checkpoints: one Orbax layout for both backends.

A checkpoint is one step directory under `W/checkpoints`, written by an
Orbax `CheckpointManager` (a temporary directory renamed on commit, so a
save cut short is never listed) with two items:

- `state`: the train state's canonical fields but the step (`saved_fields`),
  in the layout of the programs' `to_host` (no device axis for replicated
  state, a leading member axis for ensembles, optax.MultiSteps' wrapper
  removed), as global `jax.Array`s, so that Orbax writes each array once,
  cooperatively across processes.
- `run`: JSON: the run record (`shardport.training.run_records`: the strategy and
  config, who wrote it), the optimiser step and the whole state's digest
  (`shardport.workloads.digest`).

A checkpoint a classic pmap program wrote, one copy per device, is read
by `classic_checkpoints`. Restoring goes straight into a backend's layout: every leaf is restored onto
the sharding the backend's own initial state has (the devices module's
`checkpoint_target` / `from_checkpoint`), then takes that state's place.

A step that cannot be read as this program's state (a file missing or cut
short, metadata gone, arrays of another structure, values whose digest
differs) is damaged: `restore_newest` moves it aside and falls back. Only a
record that says another run wrote it is refused (`CheckpointError`).
"""

import dataclasses
import os
import sys
import time
from typing import Any

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp

from shardport.training import classic_checkpoints
from shardport.training.run_records import CheckpointError
from shardport.training.run_records import DamagedCheckpoint
from shardport.training.run_records import check_same_run
from shardport.workloads import canonical
from shardport.workloads import digest

STATE, RUN = "state", "run"

def saved_fields(state) -> dict:
  """What a checkpoint holds of `state`: its canonical fields but the step.

  The step is the checkpoint's own step number (`rebuild` sets it), and
  the digest saved beside the arrays covers it.
  """
  tree = canonical.fields(state)
  del tree["step"]
  return tree


@dataclasses.dataclass(frozen=True)
class Layout:
  """How one backend program's state maps to the checkpoint and back.

  Attributes:
    module: the program (e.g. `sharded.ensemble`), for `to_host`.
    placement: the backend's `devices` module, or its `MemberCheckpoints`
      for ensembles (the member axis leads in every backend and on disk).
    calls_per_step: calls of the step per optimiser step (the train state's
      own step counter advances by this much per optimiser step).
  """

  module: Any
  placement: Any
  calls_per_step: int = 1

  @classmethod
  def of(cls, module, calls_per_step=1):
    """The layout of `module` (a backend program): its `CHECKPOINTS`."""
    return cls(module, module.CHECKPOINTS, calls_per_step)

  def saved(self, state):
    """The state's `saved_fields` as the checkpoint holds them."""
    return self.placement.to_checkpoint(saved_fields(state))

  def digest(self, state, version: int = digest.VERSION) -> str:
    # A placement with a digest of its own reads its state block by block,
    # where to_host would gather all of it to a host.
    streamed = getattr(self.placement, "state_digest", None)
    if streamed is not None:
      return streamed(state, version)
    return digest.state_digest(self.module.to_host(state), version)

  def place_host(self, host: dict, like, step: int):
    """`module.to_host`'s canonical fields, after `step` optimiser steps,
    as the program's train state in its own layout, through the layout a
    checkpoint is restored into; `like` (its initial state) brings the
    layout, the static fields and the step counter."""
    like_tree = saved_fields(like)
    arrays = jax.tree.map(
        lambda h, t: jax.make_array_from_callback(
            t.shape, t.sharding, lambda index: np.asarray(h)[index]),
        {name: host[name] for name in like_tree},
        self.placement.checkpoint_target(like_tree))
    return rebuild(like, self.placement.from_checkpoint(arrays, like_tree),
                   step, self.calls_per_step)


def from_host_of(module_name: str):
  """Backend program `module_name`'s `from_host`
  (`shardport.strategies.protocol`): its own view of the state, the
  canonical fields, placed through its checkpoint layout (`Layout`)."""

  def from_host(host, placement, like, step, calls_per_step=1):
    del placement  # the layout's own (`CHECKPOINTS`)
    return Layout.of(sys.modules[module_name], calls_per_step).place_host(
        host, like, step)

  return from_host


def open_manager(directory, max_to_keep=None,
                 read_only=False) -> ocp.CheckpointManager:
  """A manager for `directory`: async saves; leftover temporaries removed.

  The removal runs in the background from the manager's start, so only the
  one manager that saves may do it: a second one (a `read_only` look before
  compiling) would race it for the same directories.
  """
  options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, enable_async_checkpointing=True,
      cleanup_tmp_directories=not read_only, read_only=read_only)
  handlers = {STATE: ocp.StandardCheckpointHandler(),
              RUN: ocp.JsonCheckpointHandler()}
  return ocp.CheckpointManager(os.path.abspath(directory), options=options,
                               item_handlers=handlers)


def save(manager, step: int, state, layout: Layout, record: dict) -> float:
  """Starts saving `state` as step `step`; returns the seconds it blocked.

  Orbax copies the arrays off the devices before returning and writes them
  in the background; the next save (or `wait_until_finished`) waits for it.
  """
  start = time.perf_counter()
  manager.save(step, args=ocp.args.Composite(**{
      STATE: ocp.args.StandardSave(layout.saved(state)),
      RUN: ocp.args.JsonSave({**record, "step": step,
                              "state_digest": layout.digest(state),
                              "digest_version": digest.VERSION})}))
  return time.perf_counter() - start


def read_record(manager, step: int) -> dict:
  """The `run` item of step `step`."""
  return manager.restore(step, args=ocp.args.Composite(
      **{RUN: ocp.args.JsonRestore()}))[RUN]


@dataclasses.dataclass
class Restored:
  """A state restored from a checkpoint, and what restoring it found.

  Attributes:
    state: the train state in the backend's layout.
    step: the optimiser step it was saved at.
    record: the checkpoint's `run` item.
    seconds: how long restoring took.
    classic: whether the checkpoint held one replica per device.
    damaged: newer steps that could not be restored (moved aside).
  """

  state: Any
  step: int
  record: dict
  seconds: float
  classic: bool = False
  damaged: list = dataclasses.field(default_factory=list)


def _one_line(err: BaseException) -> str:
  """The innermost error behind `err`, in one line: Orbax wraps the
  tensorstore error that names the array and what is wrong with its file."""
  while err.__cause__ or err.__context__:
    err = err.__cause__ or err.__context__
  text = str(err).strip().splitlines()
  return f"{type(err).__name__}: {text[0][:200] if text else ''}"


# region: restore
def _restore_tree(manager, step, target):
  """The `state` item of `step` onto `target`'s shardings; classic or not."""
  replicas = classic_checkpoints.replica_count(
      manager.item_metadata(step)[STATE], target, step)
  if not replicas:
    restored = manager.restore(step, args=ocp.args.Composite(**{
        STATE: ocp.args.StandardRestore(target)}))
    return restored[STATE], False
  stacked = classic_checkpoints.stacked_target(target, replicas)
  restored = manager.restore(step, args=ocp.args.Composite(**{
      STATE: ocp.args.StandardRestore(stacked)}))
  host = classic_checkpoints.collapse_replicas(restored[STATE], step)
  return jax.tree.map(lambda h, t: jax.device_put(h, t.sharding), host,
                      target), True


def rebuild(like, tree, step: int, calls_per_step: int = 1):
  """The train state `like` with the restored fields (`saved_fields`).

  `like` is the backend's initial state: it brings the layout, the static
  fields (`apply_fn`, `tx`) and the step counter, advanced to `step`. Under
  optax.MultiSteps the restored state is its inner state; its accumulator
  is zero at an optimiser-step boundary, where every checkpoint is taken.
  """
  opt_state = tree["opt_state"]
  if isinstance(like.opt_state, optax.MultiStepsState):
    opt_state = like.opt_state._replace(
        inner_opt_state=opt_state,
        gradient_step=like.opt_state.gradient_step + step)
  return like.replace(**{**tree, "opt_state": opt_state},
                      step=like.step + step * calls_per_step)


def restore_step(manager, step: int, like, layout: Layout):
  """Step `step` in the layout of `like`; returns `(state, classic)`."""
  like_tree = saved_fields(like)
  target = layout.placement.checkpoint_target(like_tree)
  tree, classic = _restore_tree(manager, step, target)
  tree = layout.placement.from_checkpoint(tree, like_tree)
  return rebuild(like, tree, step, layout.calls_per_step), classic
# endregion


def check_digest(state, layout, record, step):
  """Raises DamagedCheckpoint when the restored state is not the one saved.

  A record without a `digest_version` was written when the digest covered
  the params and optimiser state only (version 1), and is checked by that
  definition: older is not damaged. A newer version is a CheckpointError.
  """
  expected = record.get("state_digest")
  if not expected:
    return
  version = record.get("digest_version", 1)
  if version not in digest.VERSIONS:
    raise CheckpointError(
        f"the checkpoint at step {step} has a digest of version {version}, "
        f"this program knows {', '.join(map(str, digest.VERSIONS))}: it was "
        "written by a newer program")
  if layout.digest(state, version) != expected:
    raise DamagedCheckpoint(step, "it restores to other values than were "
                            "saved: its digest differs")


def _read(manager, step, like, layout, current):
  """Step `step` restored and checked: `(record, state, classic)`.

  Raises:
    CheckpointError: its record says another run wrote it; replicas that
      differ; a digest of a newer program.
    DamagedCheckpoint: anything else that keeps it from restoring, named.
  """
  try:
    record = read_record(manager, step)
  except Exception as err:  # pylint: disable=broad-except
    raise DamagedCheckpoint(
        step, f"its run record cannot be read: {_one_line(err)}") from err
  check_same_run(record, current, step)
  try:
    state, classic = restore_step(manager, step, like, layout)
  except (CheckpointError, DamagedCheckpoint):
    raise
  except Exception as err:  # pylint: disable=broad-except
    # Orbax and tensorstore raise plain Exceptions for missing or truncated
    # files.
    raise DamagedCheckpoint(
        step, f"its arrays cannot be read: {_one_line(err)}") from err
  check_digest(state, layout, record, step)
  return record, state, classic


def _move_aside(manager, step) -> str:
  """Renames a damaged step directory so that no manager lists it again."""
  path = os.path.join(str(manager.directory), str(step))
  aside = f"{path}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
  os.rename(path, aside)
  return aside


def restore_newest(manager, like, layout: Layout, current: dict,
                   warn=None) -> Restored | None:
  """The newest checkpoint that restores, in the layout of `like`.

  A step that cannot be read as this program's state (a file truncated or
  deleted, its array metadata gone, arrays of another structure, a digest
  that does not match) is damaged and skipped for the one before it; once
  one restores, the damaged newer ones are moved aside (renamed, not
  deleted), each with a one-line warning naming its damage.

  Args:
    manager: the workdir's checkpoint manager.
    like: the backend's initial train state.
    layout: the program's layout.
    current: this run's `run_record`, which every checkpoint must match.
    warn: called with each one-line warning (default: print to stderr).

  Returns:
    The restored state, or None where there is no checkpoint.

  Raises:
    CheckpointError: a checkpoint whose record says another run (strategy,
      config, seed); replicas that differ; a digest of a newer program; or
      no checkpoint restores at all (nothing is moved aside then).
  """
  warn = warn or (lambda line: print(line, file=sys.stderr))
  failures = []
  for step in sorted(manager.all_steps(), reverse=True):
    start = time.perf_counter()
    try:
      record, state, classic = _read(manager, step, like, layout, current)
    except CheckpointError:
      raise
    except Exception as err:  # pylint: disable=broad-except
      # Anything else (a record that parses but lacks a field, say) means
      # this step cannot be used either.
      failures.append((step, err.why if isinstance(err, DamagedCheckpoint)
                       else _one_line(err)))
      continue
    seconds = time.perf_counter() - start
    for bad, why in failures:
      aside = _move_aside(manager, bad)
      warn(f"warning: checkpoint step {bad} is damaged ({why}); moved to "
           f"{aside}; resuming from step {step}")
    if failures:
      manager.reload()
    return Restored(state, step, record, seconds, classic,
                    [bad for bad, _ in failures])
  if failures:
    step, why = failures[0]
    raise CheckpointError(f"no checkpoint in {manager.directory} restores "
                          f"(newest, step {step}: {why})")
  return None
