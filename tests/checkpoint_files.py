"""Checkpoint steps written or damaged by hand, for the training tests.

`classic` writes a step as a classic pmap program saves it. The damages
each take a step's directory (`W/checkpoints/N`) and the run's config, and
leave the step as a fault would: a file cut short or gone, the array
metadata gone, zeros over a data file, or arrays of another structure under
a record that still says this run wrote them.
"""

import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp

from legacy_pmap import data_parallel as legacy_dp
from sharded import data_parallel
from shardport.training import checkpoints
from shardport.training import run_records
from shardport.training import handover


def write_step(directory, step, tree, record):
  """Saves `tree` (host arrays) and `record` as step `step`, and waits."""
  manager = checkpoints.open_manager(directory)
  manager.save(step, args=ocp.args.Composite(
      state=ocp.args.StandardSave(tree),
      run=ocp.args.JsonSave({**record, "step": step})))
  manager.wait_until_finished()
  manager.close()


def classic(source, into, config, tweak=None):
  """Step 2 of workdir `source` saved the classic way, one copy per device,
  into workdir `into`; `tweak` may change the stacked host tree first."""
  state, _ = handover.resume_into(legacy_dp, legacy_dp.make_placement(8),
                                  config, source / "checkpoints", step=2,
                                  strategy="data_parallel")
  stacked = jax.tree.map(np.array, {"params": state.params,
                                    "opt_state": state.opt_state})
  if tweak:
    tweak(stacked)
  write_step(into / "checkpoints", 2, stacked, run_records.run_record(
      "data_parallel", config, "legacy_pmap", 8))
  return into


def _largest_array_file(step_dir):
  files = [p for p in (step_dir / "state").rglob("*") if p.is_file()]
  return max(files, key=lambda p: p.stat().st_size)


def truncate(step_dir, config=None):
  """The largest data file cut to half its size."""
  del config
  largest = _largest_array_file(step_dir)
  with open(largest, "r+b") as f:
    f.truncate(largest.stat().st_size // 2)


def delete_array_file(step_dir, config=None):
  """The largest data file deleted."""
  del config
  _largest_array_file(step_dir).unlink()


def zeros_over_array_file(step_dir, config=None):
  """The largest data file overwritten with as many zero bytes."""
  del config
  largest = _largest_array_file(step_dir)
  largest.write_bytes(bytes(largest.stat().st_size))


def delete_array_metadata(step_dir, config=None):
  """`state/_METADATA` deleted, every data file intact."""
  del config
  (step_dir / "state" / "_METADATA").unlink()


def _rewritten(step_dir, config, change, record=None):
  """A data-parallel step written again with `change` made to its host
  tree, under `record` (default: a fresh one of this run, with no digest)."""
  step = int(step_dir.name)
  manager = checkpoints.open_manager(step_dir.parent, read_only=True)
  saved = checkpoints.read_record(manager, step)
  manager.close()
  state, _ = handover.resume_into(
      data_parallel, data_parallel.make_placement(8), config, step_dir.parent,
      step=step, strategy="data_parallel")
  tree = jax.tree.map(np.array, checkpoints.saved_fields(state))
  change(tree["params"]["Dense_1"])
  shutil.rmtree(step_dir)
  write_step(step_dir.parent, step, tree, record or saved)


def another_structure(step_dir, config):
  """One array fewer, under a record that still says this run (the same
  strategy, config and seed) and holds no digest."""
  _rewritten(step_dir, config, lambda dense: dense.pop("bias"),
             run_records.run_record("data_parallel", config, "sharded", 8))


def other_values(step_dir, config):
  """One value 1 ulp off, under the step's own record and digest."""
  def nudge(dense):
    dense["bias"][0] = np.nextafter(dense["bias"][0], np.float32(1))
  _rewritten(step_dir, config, nudge)
