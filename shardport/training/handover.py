"""Moving a running job between backends in one process: save, then restore.

The training programs move a job through their workdir (one run saves, the
other program resumes). `compare --switch-at N` does the same between runs
of one process: `write_checkpoint` saves the pmap run's state at step N the
way the programs do, and `resume_into` restores it into a port run's layout,
so the pair "resumed port vs uninterrupted pmap" is judged like any other.
"""

import jax

from shardport.training import checkpoints
from shardport.training import run_records


def write_checkpoint(module, state, config, directory, step: int, *,
                     strategy: str) -> None:
  """Saves `state` of backend program `module` as step `step`, and waits.

  Args:
    module: the backend program that made `state`, e.g.
      `legacy_pmap.data_parallel`.
    state: its train state at step `step` (an optimiser-step boundary).
    config: the run's config, saved with the state.
    directory: the checkpoint directory (created if missing).
    step: the optimiser step.
    strategy: the strategy name to record.
  """
  layout = checkpoints.Layout.of(module)
  n_devices = len(jax.tree.leaves(state.params)[0].sharding.device_set)
  record = run_records.run_record(strategy, config, module.BACKEND, n_devices)
  manager = checkpoints.open_manager(directory)
  try:
    checkpoints.save(manager, step, state, layout, record)
    manager.wait_until_finished()
  finally:
    manager.close()


def resume_into(module, placement, config, directory, step=None, *,
                strategy: str, calls_per_step: int = 1):
  """A checkpoint of `directory` as backend program `module`'s train state.

  Args:
    module: a backend program, e.g. `sharded.data_parallel`.
    placement: its `make_placement(n_devices)`.
    config: the run's config; the checkpoint's must match it (but for
      `run_records.MAY_DIFFER`).
    directory: the checkpoint directory (a workdir's `checkpoints/`).
    step: the step to restore; the newest if None.
    strategy: the strategy the checkpoint must have been written by.
    calls_per_step: the strategy's `calls_per_step(config, variant)`.

  Returns:
    `(state, step)`: the state in `module`'s layout on `placement`, bitwise
    the one saved.

  Raises:
    checkpoints.CheckpointError: a checkpoint of another run, or replicas
      of a classic checkpoint that differ.
  """
  layout = checkpoints.Layout.of(module, calls_per_step)
  like = module.create_state(config.seed, config, placement)
  current = run_records.run_record(strategy, config, "", 0)
  manager = checkpoints.open_manager(directory, read_only=True)
  try:
    step = manager.latest_step() if step is None else step
    record = checkpoints.read_record(manager, step)
    run_records.check_same_run(record, current, step)
    state, _ = checkpoints.restore_step(manager, step, like, layout)
    checkpoints.check_digest(state, layout, record, step)
  finally:
    manager.close()
  return state, step
