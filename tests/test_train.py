"""The training programs: resume, moving a job between backends, faults.

The jobs are `tests.training_jobs`' short runs: each backend's and
strategy's uninterrupted run is made once (`finished`) and its step-2
checkpoint stands in for a job stopped there.
"""

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from shardport.training import checkpoints
from shardport.training import handover
from shardport.training import dispatch
from shardport import strategies
from shardport.strategies.data_parallel import Reference as reference
from legacy_pmap import data_parallel as legacy_dp
from legacy_pmap import train as legacy_train
from sharded import data_parallel as sharded_dp
from sharded import train as sharded_train
from tests import checkpoint_files
from tests.training_jobs import ROOT
from tests.training_jobs import argv_for
from tests.training_jobs import compile_once  # pylint: disable=unused-import (autouse)
from tests.training_jobs import config_for
from tests.training_jobs import digest_of
from tests.training_jobs import finished  # pylint: disable=unused-import (a fixture)
from tests.training_jobs import stopped_at
from tests.training_jobs import train_job
from shardport.workloads import batches
from shardport.workloads import digest

def _nudged_continuation(backend, strategy, source, data):
  """Step 2 of `source` with every parameter 1e-6 off, run to step 4."""
  chosen = strategies.get(strategy)
  config = config_for(strategy, data)
  module = importlib.import_module(f"{backend}.{chosen.program}")
  placement = module.make_placement(8)
  state, _ = handover.resume_into(module, placement, config,
                                     source / "checkpoints", step=2,
                                     strategy=strategy)
  state = state.replace(params=jax.tree.map(lambda x: x * (1 + 1e-6),
                                            state.params))
  step = dispatch.optimizer_step(
      module.make_train_step(config, placement, module.VARIANTS[0]),
      chosen.calls_per_step(config, module.VARIANTS[0]))
  for batch in list(batches.train_batches(data, config.seed, 64, 4))[2:]:
    state, _ = step(state, module.put_batch(batch, placement))
    jax.block_until_ready(state)
  return digest.state_digest(module.to_host(state))


@pytest.mark.parametrize("strategy", ["data_parallel", "ensemble",
                                      "accumulation", "fsdp"])
def test_a_job_moves_between_backends_bitwise(strategy, finished, tmp_path,
                                              digits, capsys):
  legacy, port = (finished(b, strategy) for b in ("legacy_pmap", "sharded"))
  assert digest_of(legacy) == digest_of(port)  # pmap and shard_map: bitwise
  for source, target in ((legacy, "sharded"), (port, "legacy_pmap")):
    workdir = stopped_at(source, 2, tmp_path / target)
    capsys.readouterr()
    result = train_job(target, strategy, workdir)
    # The digest alone cannot tell a resumed run from one that silently
    # started over (the batches depend only on the seed and the step): the
    # log, the result and the steps actually taken say where it resumed.
    assert "resumed from step 2 (" in capsys.readouterr().out
    assert result["resumed_from"] == 2 and result["steps_run"] == 2
    assert result["resumed_from_backend"] != target
    assert result["state_digest"] == digest_of(legacy)
  # Negative control: the same continuation from a state 1e-6 off differs.
  assert _nudged_continuation("sharded", strategy, legacy,
                              digits) != digest_of(legacy)


def test_metrics_log_one_line_per_evaluation_after_resume(finished,
                                                           tmp_path, capsys):
  workdir = stopped_at(finished("sharded", "data_parallel"), 2, tmp_path / "w")
  with open(workdir / "metrics.jsonl", "a") as f:
    f.write('{"step": 3, "train_loss": 1.0}\n{"step": 4, "tr')  # killed
  capsys.readouterr()
  train_job("legacy_pmap", "data_parallel", workdir, "--eval-every", "1")
  # The log says once what its train_ and test_ numbers are: the classic
  # loss summed over a device's examples beside a mean per test example.
  out = capsys.readouterr().out
  assert out.count("(train_ metrics:") == 1, out
  assert "summed over each device's examples" in out
  lines = (workdir / "metrics.jsonl").read_text().splitlines()
  logged = [json.loads(line) for line in lines]
  assert [line["step"] for line in logged] == [3, 4]  # step 2 not evaluated
  assert logged[0]["train_loss"] != 1.0  # the killed run's line is gone


def test_an_8_member_pmap_ensemble_continues_on_4_then_2_devices(
    finished, tmp_path):
  full = finished("legacy_pmap", "ensemble")
  workdir = stopped_at(full, 2, tmp_path / "w")
  on_4 = train_job("sharded", "ensemble", workdir, "--devices", "4", steps=3)
  assert on_4["resumed_from_devices"] == 8
  on_2 = train_job("sharded", "ensemble", workdir, "--devices", "2")
  assert on_2["resumed_from"] == 3 and on_2["resumed_from_devices"] == 4
  assert on_2["state_digest"] == digest_of(full)
  assert on_4["state_digest"] != digest_of(full)  # step 3 is not step 4


def test_pmap_cannot_take_8_members_on_4_devices(finished, tmp_path, capsys):
  workdir = stopped_at(finished("legacy_pmap", "ensemble"), 2, tmp_path / "w")
  assert legacy_train.main(argv_for("ensemble", workdir, 4, "--devices",
                                 "4")) == 2
  assert "exactly one member per device" in capsys.readouterr().err


def test_data_parallel_on_fewer_devices_follows_their_normalisation(
    finished, tmp_path, capsys, digits):
  full = finished("legacy_pmap", "data_parallel")
  workdir = stopped_at(full, 2, tmp_path / "w")
  result = train_job("sharded", "data_parallel", workdir, "--devices", "4")
  assert "follow 4 devices' loss normalisation" in capsys.readouterr().err
  assert result["state_digest"] != digest_of(full)  # 8-device normalisation
  # The continuation is the reference's on 4 devices, from the same state.
  config = config_for("data_parallel", digits)
  mesh = sharded_dp.make_placement(4)
  start, _ = handover.resume_into(sharded_dp, mesh, config,
                                     workdir / "checkpoints", step=2,
                                  strategy="data_parallel")
  end, _ = handover.resume_into(sharded_dp, mesh, config,
                                   workdir / "checkpoints", step=4,
                                strategy="data_parallel")
  one = reference.make_placement(4)
  state = reference.create_state(config.seed, config, one)
  host = sharded_dp.to_host(start)
  state = state.replace(**jax.device_put(host))
  step = reference.make_train_step(config, one)
  for batch in list(batches.train_batches(digits, config.seed, 64, 4))[2:]:
    state, _ = step(state, reference.put_batch(batch, one))
  ends = jax.tree.leaves(sharded_dp.to_host(end))
  for got, want in zip(ends, jax.tree.leaves(reference.to_host(state))):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  eight, _ = handover.resume_into(sharded_dp, mesh, config,
                                     full / "checkpoints", step=4,
                                  strategy="data_parallel")
  assert max(np.abs(a - b).max() for a, b in zip(
      ends, jax.tree.leaves(sharded_dp.to_host(eight)))) > 1e-3


def test_a_classic_replicated_checkpoint_restores(finished, tmp_path, digits,
                                                  capsys):
  full = finished("legacy_pmap", "data_parallel")
  config = config_for("data_parallel", digits)
  workdir = checkpoint_files.classic(full, tmp_path / "w", config)
  result = train_job("sharded", "data_parallel", workdir)
  assert result["restored_classic_layout"]
  assert result["state_digest"] == digest_of(full)

  def nudge(tree):  # replica 3 of one leaf, 1 ulp off
    bias = tree["params"]["Dense_0"]["bias"]
    bias[3, 0] = np.nextafter(bias[3, 0], np.float32(1))

  capsys.readouterr()
  bad = checkpoint_files.classic(full, tmp_path / "bad", config, nudge)
  assert sharded_train.main(argv_for("data_parallel", bad)) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("train: error:") and len(err.splitlines()) == 1
  assert "['params']['Dense_0']['bias'] replica 3" in err


_SLOW_COMMIT = """
import asyncio, sys
from orbax.checkpoint._src.path import atomicity
commit = atomicity.AtomicRenameTemporaryPath.finalize
async def slow_commit(self):
  if self.get_final().name == "4":  # the last save: killed before its commit
    print("committing", flush=True)
    await asyncio.sleep(120)
  await commit(self)
atomicity.AtomicRenameTemporaryPath.finalize = slow_commit
from sharded import train
sys.exit(train.main(sys.argv[1:]))
"""


def test_kill_during_a_save_then_resume(finished, tmp_path, compile_once):
  workdir = tmp_path / "w"
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
         "JAX_COMPILATION_CACHE_DIR": compile_once,
         "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
  job = subprocess.Popen(
      [sys.executable, "-c", _SLOW_COMMIT, *argv_for("data_parallel", workdir)],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
      text=True)
  try:
    for line in job.stdout:  # the save's files are written, not committed
      if line.startswith("committing"):
        break
    time.sleep(0.2)
    os.kill(job.pid, signal.SIGKILL)
  finally:
    job.kill()
    job.wait()
  saved = sorted(p.name for p in (workdir / "checkpoints").iterdir())
  assert saved[0] == "2" and saved[1].startswith("4.orbax-checkpoint-tmp")
  result = train_job("sharded", "data_parallel", workdir)
  assert result["resumed_from"] == 2  # the uncommitted step 4 was not read
  assert result["state_digest"] == digest_of(
      finished("legacy_pmap", "data_parallel"))
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == [
      "2", "4"]


@pytest.mark.parametrize("damage, says", [
    (checkpoint_files.delete_array_metadata,
     "its array metadata, state/_METADATA, is missing"),
    (checkpoint_files.delete_array_file, "its arrays cannot be read: "),
    (checkpoint_files.truncate, "its arrays cannot be read: "),
    (checkpoint_files.zeros_over_array_file, "its arrays cannot be read: "),
    (checkpoint_files.other_values, "its digest differs"),
    (checkpoint_files.another_structure,
     "it holds 15 arrays, this program's state 16"),
])
def test_a_damaged_checkpoint_falls_back_to_the_one_before(
    damage, says, finished, tmp_path, capsys, digits):
  full = finished("sharded", "data_parallel")
  workdir = tmp_path / "w"
  shutil.copytree(full, workdir)
  damage(workdir / "checkpoints" / "4", config_for("data_parallel", digits))
  capsys.readouterr()
  result = train_job("legacy_pmap", "data_parallel", workdir)
  warnings = [line for line in capsys.readouterr().err.splitlines()
              if "warning:" in line]
  assert len(warnings) == 1, warnings
  assert warnings[0].startswith(
      "train: warning: checkpoint step 4 is damaged (")
  assert says in warnings[0] and warnings[0].endswith("resuming from step 2")
  assert result["resumed_from"] == 2 and result["damaged_checkpoints"] == [4]
  assert result["state_digest"] == digest_of(full)
  assert any(p.name.startswith("4.damaged-")
             for p in (workdir / "checkpoints").iterdir())


@pytest.mark.parametrize("damaged, resumed", [([6], 4), ([6, 4], 2)])
def test_the_newest_complete_checkpoint_of_three_is_the_one_resumed(
    damaged, resumed, tmp_path, capsys, digits):
  # Three kept (2, 4, 6): the fallback is the newest that restores, never
  # the oldest (with two kept they are the same step, and a loop that
  # jumped to the oldest passed the test above).
  full = tmp_path / "full"
  train_job("sharded", "data_parallel", full, steps=6)
  assert sorted(p.name for p in (full / "checkpoints").iterdir()) == [
      "2", "4", "6"]
  workdir = tmp_path / "w"
  shutil.copytree(full, workdir)
  (workdir / "result.json").unlink()
  for step in damaged:
    checkpoint_files.truncate(workdir / "checkpoints" / str(step))
  capsys.readouterr()
  result = train_job("legacy_pmap", "data_parallel", workdir, steps=6)
  assert result["resumed_from"] == resumed
  assert sorted(result["damaged_checkpoints"]) == sorted(damaged)
  assert result["state_digest"] == digest_of(full)


def test_no_checkpoint_that_restores_is_refused(finished, tmp_path, capsys):
  workdir = tmp_path / "w"
  shutil.copytree(finished("sharded", "data_parallel"), workdir)
  # With every checkpoint damaged nothing is moved, and the run refuses.
  (workdir / "checkpoints" / "2" / "run" / "metadata").write_text("{")
  checkpoint_files.truncate(workdir / "checkpoints" / "4")
  capsys.readouterr()
  assert legacy_train.main(argv_for("data_parallel", workdir)) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("train: error: no checkpoint in")
  assert len(err.splitlines()) == 1
  assert (workdir / "checkpoints" / "4").exists()


@pytest.mark.parametrize("change, says", [
    (["--learning-rate", "0.01"], "learning_rate 0.004 there, 0.01 here"),
    (["--seed", "1"], "seed 0 there, 1 here"),
    (["--workload", "linreg"], "workload 'cnn' there, 'linreg' here"),
])
def test_resuming_another_run_is_refused(change, says, finished, capsys):
  workdir = finished("sharded", "data_parallel")
  assert sharded_train.main(argv_for("data_parallel", workdir, 4, *change)) == 2
  err = capsys.readouterr().err.strip()
  assert err == f"train: error: the checkpoint at step 4 is of another run: " \
                f"{says}"


def test_resuming_another_strategy_or_member_count_is_refused(finished,
                                                              capsys):
  workdir = finished("sharded", "data_parallel")
  argv = argv_for("accumulation", workdir)
  assert sharded_train.main(argv) == 2
  assert "strategy 'data_parallel' there, 'accumulation' here" in \
      capsys.readouterr().err
  ensemble = finished("sharded", "ensemble")
  assert sharded_train.main(argv_for("ensemble", ensemble, 4, "--members",
                                  "16")) == 2
  assert "members 8 there, 16 here" in capsys.readouterr().err


def test_bad_input_and_unwritable_workdir_exit_2(tmp_path, capsys,
                                                 monkeypatch):
  blocker = tmp_path / "file"
  blocker.write_text("")
  for argv in (argv_for("data_parallel", blocker / "w"),
               argv_for("data_parallel", tmp_path / "w", 0),
               argv_for("data_parallel", tmp_path / "w", 4, "--devices", "99"),
               argv_for("data_parallel", tmp_path / "w", 4, "--max-to-keep",
                     "0")):
    assert legacy_train.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("train: error: ") and len(err.splitlines()) == 1
  from shardport.training import workdir  # pylint: disable=g-import-not-at-top
  full_disk = shutil.disk_usage(tmp_path)._replace(free=1000)
  monkeypatch.setattr(workdir.shutil, "disk_usage", lambda _: full_disk)
  assert legacy_train.main(argv_for("data_parallel", tmp_path / "full")) == 2
  assert "MiB free" in capsys.readouterr().err
  assert not (tmp_path / "full" / "checkpoints").exists() or not any(
      (tmp_path / "full" / "checkpoints").iterdir())


def test_resume_into_and_write_checkpoint_for_compare(finished, tmp_path,
                                                      digits):
  """The functions `compare --switch-at N` builds on."""
  config = config_for("data_parallel", digits)
  source = finished("legacy_pmap", "data_parallel") / "checkpoints"
  state, step = handover.resume_into(
      legacy_dp, legacy_dp.make_placement(8), config, source, step=2,
      strategy="data_parallel")
  handover.write_checkpoint(legacy_dp, state, config, tmp_path / "c", 2,
                               strategy="data_parallel")
  port, step = handover.resume_into(
      sharded_dp, sharded_dp.make_placement(8), config, tmp_path / "c",
      strategy="data_parallel")
  assert step == 2
  assert digest.state_digest(sharded_dp.to_host(port)) == \
      digest.state_digest(legacy_dp.to_host(state))
  # Negative control: the same state handed over as step 3 (a switch one
  # step early) restores with the step counter of 3, which its digest,
  # taken at 2, refuses.
  handover.write_checkpoint(legacy_dp, state, config, tmp_path / "c", 3,
                            strategy="data_parallel")
  with pytest.raises(checkpoints.DamagedCheckpoint, match="digest differs"):
    handover.resume_into(sharded_dp, sharded_dp.make_placement(8), config,
                         tmp_path / "c", strategy="data_parallel")
