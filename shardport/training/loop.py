"""The loop both backends' train.py run: train, evaluate, checkpoint, resume.

`python -m legacy_pmap.train` and `python -m sharded.train` are this loop
over one backend's modules, in the style of the flax examples'
`train_and_evaluate(config, workdir)`. The workdir holds `checkpoints/`
(Orbax), `metrics.jsonl` (one line per evaluation) and `result.json`.

A run started again in the same workdir resumes from the newest complete
checkpoint and takes the batches the uninterrupted run would have taken
(the batch order depends only on the seed and the step), so it ends with
the same state bit for bit, whichever backend wrote the checkpoint.
"""

import dataclasses
import importlib
import itertools
import json
import os
import sys
import time
from typing import Any

import jax
import numpy as np
import tqdm

from shardport import strategies
from shardport.launch import distributed
from shardport.launch import files
from shardport.training import checkpoints
from shardport.training import run_records
from shardport.training import dispatch
from shardport.training import metrics as run_metrics
from shardport.training import workdir as workdirs
from shardport.workloads import batches
from shardport.workloads import datasets


@dataclasses.dataclass(frozen=True)
class Schedule:
  """When a run evaluates and checkpoints.

  Attributes:
    eval_every: steps between test evaluations (the strategy's default if
      None); the last step is always evaluated.
    checkpoint_every: steps between checkpoints; 0 for the last step only,
      which is always saved.
    max_to_keep: checkpoints kept on disk (Orbax removes older ones).
  """

  eval_every: int | None = None
  checkpoint_every: int = 50
  max_to_keep: int = 3


@dataclasses.dataclass
class TrainingJob:
  """One training run, checked and set up, nothing compiled yet."""

  backend: str
  program: strategies.Program
  config: Any
  data: Any
  n_devices: int
  workdir: str
  schedule: Schedule
  module: Any
  placement: Any
  layout: checkpoints.Layout
  record: dict
  eval_every: int


def _path(job, name):
  return os.path.join(job.workdir, name)


def _peek_newest(job) -> int:
  """The newest readable checkpoint's step (0 if none), checked against
  this run: same strategy and config, not past its last step."""
  if not os.path.isdir(_path(job, "checkpoints")):
    return 0
  manager = checkpoints.open_manager(_path(job, "checkpoints"),
                                     read_only=True)
  try:
    for step in sorted(manager.all_steps(), reverse=True):
      try:
        record = checkpoints.read_record(manager, step)
      except Exception:  # pylint: disable=broad-except
        continue  # damaged: restore_newest reports it and falls back
      run_records.check_same_run(record, job.record, step)
      if step > job.config.steps:
        raise checkpoints.CheckpointError(
            f"{job.workdir} holds step {step}, past this run's last step "
            f"({job.config.steps}): ask for --steps {step} or more")
      return step
    return 0
  finally:
    manager.close()


def prepare(backend: str, program, config, workdir: str, *, data,
            n_devices: int,
            schedule: Schedule = Schedule()) -> TrainingJob:
  """Checks everything about a run that can be checked before compiling.

  Args:
    backend: the backend package's name, whose `<program>` module trains.
    program: a `shardport.strategies` name or Program.
    config: the program's config (`program.make_config`), validated.
    workdir: where checkpoints, metrics and the result go.
    data: the dataset.
    n_devices: devices per process.
    schedule: evaluation and checkpoint intervals.

  Raises:
    ValueError: (one line) devices, ensemble size, workdir, or a checkpoint
      in the workdir written by another run.
  """
  program = strategies.get(program) if isinstance(program, str) else program
  module = importlib.import_module(f"{backend}.{program.program}")
  program.check_module(module, config, run_metrics.global_devices(n_devices))
  placement = module.make_placement(n_devices)
  calls = program.calls_per_step(config, module.VARIANTS[0])
  workdirs.check_workdir(workdir)
  job = TrainingJob(
      backend, program, config, data, n_devices, workdir, schedule, module,
      placement, checkpoints.Layout.of(module, calls),
      run_records.run_record(program.name, config, module.BACKEND,
                             run_metrics.global_devices(n_devices),
                             program.restores),
      schedule.eval_every or program.eval_every(config,
                                                len(data.train_inputs)))
  _peek_newest(job)
  # Many processes: every one looks before any starts writing checkpoints
  # (the look depends on whether the directory exists yet, and every
  # process must open the same managers: Orbax's barriers pair them up).
  distributed.barrier("looked-at-checkpoints")
  return job


def _log(line, progress):
  if distributed.is_main_process():
    (tqdm.tqdm.write if progress else print)(line)


def _process_rows(job) -> tuple[int, int]:
  """`(process_index, process_count)` of the rows `put_batch` takes: this
  process's slice for data-parallel programs, the whole batch otherwise."""
  if getattr(job.module, "PROCESS_LOCAL_BATCH", False):
    return jax.process_index(), jax.process_count()
  return 0, 1


def _restore(job, manager, like, progress):
  """The state to start from, and what restoring it found (None: fresh)."""
  main = distributed.is_main_process()
  restored = checkpoints.restore_newest(
      manager, like, job.layout, job.record,
      warn=lambda line: main and print(f"train: {line}", file=sys.stderr))
  if restored is None:
    return like, None
  if main:
    workdirs.rewind_metrics(_path(job, "metrics.jsonl"), restored.step)
  record = restored.record
  _log(f"resumed from step {restored.step} ({record['backend']}, "
       f"{record['devices']} devices"
       f"{', one copy per device' if restored.classic else ''}) in "
       f"{restored.seconds:.2f} s", progress)
  devices = run_metrics.global_devices(job.n_devices)
  if (record["devices"] != devices and job.program.loss_depends_on_devices
      and main):
    print(f"train: note: the checkpoint was written on {record['devices']} "
          f"devices, this run has {devices}: the state restores "
          f"bitwise, and from here on the steps follow {devices} "
          "devices' loss normalisation (the classic loss sums over each "
          "device's batch: shardport/workloads/registry.py)", file=sys.stderr)
  return restored.state, restored


@dataclasses.dataclass
class _Loop:
  """The compiled programs of one run, and what its loop measured."""

  step: Any
  evaluate: Any
  test_batch: Any
  save_s: list = dataclasses.field(default_factory=list)
  since_eval: list = dataclasses.field(default_factory=list)
  # Steps this run took, counted as they run (not steps - start): a loop
  # that restarted from 0 ends with the same digest, but not the same count.
  steps_run: int = 0
  timed_steps: int = 0
  timed_s: float = 0.0
  eval_s: float = 0.0
  last_saved: int = 0
  explained: bool = False  # the metrics' legend logged once


def _programs(job, start):
  module = job.module
  step = dispatch.optimizer_step(
      module.make_train_step(job.config, job.placement, module.VARIANTS[0]),
      job.layout.calls_per_step)
  test_batch = batches.test_batch(job.data,
                                 run_metrics.global_devices(job.n_devices))
  index, count = _process_rows(job)
  part = batches.process_slice(len(test_batch["targets"]), index, count)
  test_batch = module.put_batch({k: v[part] for k, v in test_batch.items()},
                                job.placement)
  return _Loop(step, module.make_evaluate(job.config, job.placement),
               test_batch, last_saved=start)


def _evaluate(job, loop, state):
  return run_metrics.test_summary(job.program, job.module, job.config,
                                  loop.evaluate(state, loop.test_batch))


def _log_evaluation(job, loop, state, done, metrics_file, progress):
  """Appends one line to metrics.jsonl: train means since the last, test."""
  line = run_metrics.history_line(done, loop.since_eval,
                                  _evaluate(job, loop, state))
  metrics_file.write(json.dumps(line) + "\n")
  metrics_file.flush()
  loop.since_eval = []
  if not loop.explained:
    loop.explained = True
    _log("(train_ metrics: the steps' own since the last line, the loss "
         + ("summed over each device's examples, as the classic loss is"
            if job.program.loss_depends_on_devices else
            "a mean per example") + "; test_ metrics: per test example)",
         progress)
  _log(" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in line.items() if not isinstance(v, list)),
       progress)


def _train(job, manager, state, start, progress):
  """Steps `start`..`config.steps`; evaluates and checkpoints on schedule."""
  config, loop = job.config, _programs(job, start)
  every, save_every = job.eval_every, job.schedule.checkpoint_every
  # region: resume-order
  # The batch order depends only on the seed and the step: a run resumed at
  # `start` takes exactly the batches the uninterrupted run takes from there.
  order = itertools.islice(batches.train_batches(
      job.data, config.seed, config.global_batch, config.steps,
      *_process_rows(job)), start, None)
  # endregion
  bar = tqdm.tqdm(order, total=config.steps, initial=start, desc=job.backend,
                  file=sys.stderr, disable=not progress)
  began = None
  # One metrics.jsonl, from process 0.
  metrics_path = (_path(job, "metrics.jsonl")
                  if distributed.is_main_process() else os.devnull)
  with open(metrics_path, "a") as metrics_file:
    for done, host_batch in enumerate(bar, start + 1):
      try:
        state, metrics = loop.step(state, job.module.put_batch(host_batch,
                                                               job.placement))
        if dispatch.max_in_flight() == 1:
          jax.block_until_ready(state)  # queued collectives deadlock CPU
      except Exception as err:
        err.add_note(f"at step {done}")  # the crash's line names it
        raise
      loop.steps_run += 1
      loop.since_eval.append(run_metrics.train_metrics(job.module, metrics))
      if began is None:
        began = time.perf_counter()  # timed once the first step compiled
      else:
        loop.timed_steps += 1
      if done % every == 0 or done == config.steps:
        tick = time.perf_counter()
        _log_evaluation(job, loop, state, done, metrics_file, progress)
        loop.eval_s += time.perf_counter() - tick
      if save_every and done % save_every == 0 and done < config.steps:
        loop.save_s.append(checkpoints.save(manager, done, state, job.layout,
                                            job.record))
        loop.last_saved = done
  # Steps and saves, not evaluations: the step rate that checkpoints cost.
  loop.timed_s = time.perf_counter() - began - loop.eval_s if began else 0.0
  bar.close()
  return state, loop


def run(job: TrainingJob, progress: bool = False) -> dict:
  """Trains the prepared job to its last step; writes and returns the result.

  Raises:
    checkpoints.CheckpointError, workdirs.WorkdirError: the workdir's
      checkpoints or disk do not allow the run (before the first step).
  """
  manager = checkpoints.open_manager(_path(job, "checkpoints"),
                                     job.schedule.max_to_keep)
  try:
    like = job.module.create_state(job.config.seed, job.config,
                                   job.placement)
    workdirs.check_space(job, like)
    state, restored = _restore(job, manager, like, progress)
    start = restored.step if restored else 0
    state, loop = _train(job, manager, state, start, progress)
    if loop.last_saved < job.config.steps:
      loop.save_s.append(checkpoints.save(manager, job.config.steps, state,
                                          job.layout, job.record))
    wait_start = time.perf_counter()
    manager.wait_until_finished()
    wait_s = time.perf_counter() - wait_start
  finally:
    manager.close()
  result = _result(job, state, loop, restored, start, wait_s)
  result.update(_evaluate(job, loop, state))
  # One result.json, from process 0, once every process got this far.
  distributed.barrier("result")
  if distributed.is_main_process():
    files.write_json(result, _path(job, "result.json"))
  return result


def _result(job, state, loop, restored, start, wait_s):
  return {
      "program": f"python -m {job.backend}.train",
      "backend": job.backend, "variant": job.module.VARIANTS[0],
      "strategy": job.program.name, "workload": job.config.workload,
      "dataset": job.config.dataset,
      "devices": run_metrics.global_devices(job.n_devices),
      "processes": jax.process_count(), "platform": jax.default_backend(),
      "steps": job.config.steps, "resumed_from": start if restored else None,
      "steps_run": loop.steps_run,
      # The layout's digest: a sharded state's is read block by block, as its
      # saves do, instead of gathering all of it to every host.
      "state_digest": job.layout.digest(state),
      "steps_per_s": (loop.timed_steps / loop.timed_s
                      if loop.timed_s else None),
      "checkpoint_every": job.schedule.checkpoint_every,
      "max_to_keep": job.schedule.max_to_keep,
      "saves": len(loop.save_s),
      "save_s": float(np.mean(loop.save_s)) if loop.save_s else None,
      "save_s_max": max(loop.save_s, default=None),
      "save_wait_s": wait_s,
      "restore_s": restored.seconds if restored else None,
      "restored_classic_layout": bool(restored and restored.classic),
      "damaged_checkpoints": restored.damaged if restored else [],
      "resumed_from_backend": restored.record["backend"] if restored else None,
      "resumed_from_devices": restored.record["devices"] if restored else None,
      "config": job.record["config"],
  }


def train_and_evaluate(backend: str, config, workdir: str, *, program,
                       data=None, data_dir=None, n_devices=None,
                       schedule: Schedule = Schedule(),
                       progress: bool = False) -> dict:
  """Trains `config` with `backend`'s program in `workdir`; returns the result.

  Args:
    backend: `legacy_pmap` or `sharded`.
    config: the program's config (`program.make_config`).
    workdir: where checkpoints, metrics and the result go; a checkpoint
      already there is resumed from.
    program: a `shardport.strategies` name or Program.
    data: the dataset (loaded from `config.dataset` if None).
    data_dir: tensorflow-datasets directory, where `data` is None.
    n_devices: devices to run on (all local devices if None).
    schedule: evaluation and checkpoint intervals.
    progress: show a tqdm bar.
  """
  data = data or datasets.load(config.dataset, data_dir)
  job = prepare(backend, program, config, workdir, data=data,
                n_devices=n_devices or jax.local_device_count(),
                schedule=schedule)
  return run(job, progress)
