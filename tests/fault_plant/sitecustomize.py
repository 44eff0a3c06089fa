"""Test plant: one worker's optimiser step raises at a chosen step.

On `PYTHONPATH` ahead of the repository, Python imports this module at
start-up in every process of a job. With `SHARDPORT_PLANT_RAISE=P:S` set, the
worker started with `--process-id P` gets a `shardport.training.dispatch.
optimizer_step` whose step raises `RuntimeError("planted fault")` on its S-th
call (every step the training loop and compare's runner take goes through
it). With `SHARDPORT_PLANT_RAISED_AT=FILE` too, it writes the wall-clock time
of the raise there (the test measures the job's end from it). Patched when that module is first imported, so that nothing here
imports jax before the programs set their device count.
"""

import importlib.abc
import importlib.machinery
import os
import sys
import time

TARGET = "shardport.training.dispatch"


def _planted():
  """`(process id, step)` from the environment, or None."""
  value = os.environ.get("SHARDPORT_PLANT_RAISE")
  if not value or "--process-id" not in sys.argv:
    return None
  process, step = map(int, value.split(":"))
  if sys.argv[sys.argv.index("--process-id") + 1] != str(process):
    return None
  return process, step


def _patch(module, step_number):
  real = module.optimizer_step

  def optimizer_step(step, calls):
    inner = real(step, calls)
    taken = [0]

    def planted(state, batch):
      taken[0] += 1
      if taken[0] == step_number:
        if os.environ.get("SHARDPORT_PLANT_RAISED_AT"):
          with open(os.environ["SHARDPORT_PLANT_RAISED_AT"], "w") as out:
            out.write(repr(time.time()))
        raise RuntimeError("planted fault")
      return inner(state, batch)

    return planted

  module.optimizer_step = optimizer_step


class _Finder(importlib.abc.MetaPathFinder):
  """Patches `TARGET` once it has been executed."""

  def __init__(self, step_number):
    self.step_number = step_number

  def find_spec(self, name, path, target=None):
    if name != TARGET:
      return None
    spec = importlib.machinery.PathFinder.find_spec(name, path, target)
    if spec is None:
      return None
    execute, step_number = spec.loader.exec_module, self.step_number

    def exec_module(module):
      execute(module)
      _patch(module, step_number)

    spec.loader.exec_module = exec_module
    return spec


if _planted():
  sys.meta_path.insert(0, _Finder(_planted()[1]))
