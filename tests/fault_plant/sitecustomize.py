"""Test plant: one worker's step raises at a chosen step.

On `PYTHONPATH` ahead of the repository, Python imports this module at
start-up in every process of a job. With `SHARDPORT_PLANT_RAISE=P:S[:RUN]`
set, the worker started with `--process-id P` gets a
`shardport.training.dispatch.optimizer_step` whose steps raise
`RuntimeError("planted fault")` at step S (the training loop's `done`,
compare's runner's `i + 1`), in compare only in the run named RUN if given.
Every step the training loop and compare's runner take goes through
`optimizer_step`. With `SHARDPORT_PLANT_RAISED_AT=FILE` too, it writes the
wall-clock time of the raise there (the test measures the job's end from
it). Patched when that module is first imported, so that nothing here
imports jax before the programs set their device count.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import time

TARGET = "shardport.training.dispatch"


def _planted():
  """`(step, run name or None)` for this process, or None."""
  value = os.environ.get("SHARDPORT_PLANT_RAISE")
  if not value or "--process-id" not in sys.argv:
    return None
  process, step, *run = value.split(":")
  if sys.argv[sys.argv.index("--process-id") + 1] != process:
    return None
  return int(step), (run[0] if run else None)


def _where(frame):
  """`(step, run name)` of the loop that called the step (its locals)."""
  while frame is not None:
    names = frame.f_locals
    if "done" in names and "host_batch" in names:  # the training loop
      return names["done"], None
    if "run" in names and "i" in names:  # compare's runner
      return names["i"] + 1, names["run"].name
    frame = frame.f_back
  return None, None


def _patch(module, at, run_name):
  real = module.optimizer_step

  def optimizer_step(step, calls):
    inner = real(step, calls)

    def planted(state, batch):
      caller = sys._getframe(1)  # pylint: disable=protected-access
      step_number, name = _where(caller)
      if step_number == at and run_name in (None, name):
        if os.environ.get("SHARDPORT_PLANT_RAISED_AT"):
          with open(os.environ["SHARDPORT_PLANT_RAISED_AT"], "w") as out:
            out.write(repr(time.time()))
        raise RuntimeError("planted fault")
      return inner(state, batch)

    return planted

  module.optimizer_step = optimizer_step


class _Finder(importlib.abc.MetaPathFinder):
  """Patches `TARGET` once it has been executed."""

  def __init__(self, planted):
    self.planted = planted

  def find_spec(self, name, path, target=None):
    if name != TARGET:
      return None
    spec = importlib.machinery.PathFinder.find_spec(name, path, target)
    if spec is None:
      return None
    execute, planted = spec.loader.exec_module, self.planted

    def exec_module(module):
      execute(module)
      _patch(module, *planted)

    spec.loader.exec_module = exec_module
    return spec


if _planted():
  sys.meta_path.insert(0, _Finder(_planted()))
