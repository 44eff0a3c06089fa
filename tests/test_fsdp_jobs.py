"""fsdp's training jobs: a data_parallel job goes on as fsdp and back, an
fsdp checkpoint restores on fewer devices with its digest, and in 2
processes a save gathers nothing to a host and restores in a fresh job."""

import json
import subprocess
import sys

from legacy_pmap import fsdp as legacy_fsdp
from sharded import fsdp as sharded_fsdp
from sharded import train as sharded_train
from shardport import strategies
from shardport.strategies import fsdp
from tests import fsdp_save_probe as probe
from tests.training_jobs import ROOT
from tests.training_jobs import argv_for
from tests.training_jobs import compile_once  # pylint: disable=unused-import (autouse)
from tests.training_jobs import config_for
from tests.training_jobs import digest_of
from tests.training_jobs import finished  # pylint: disable=unused-import (a fixture)
from tests.training_jobs import stopped_at
from tests.training_jobs import train_job
from shardport.training import handover
from shardport.workloads import datasets
from shardport.workloads import digest


def test_a_data_parallel_job_goes_on_as_fsdp_and_back(finished, tmp_path,
                                                      capsys):
  # fsdp's shard_map step is data_parallel's, bit for bit, on one process:
  # a job moved between the two ends with the same digest either way.
  dp, fsdp = (finished("sharded", s) for s in ("data_parallel", "fsdp"))
  assert digest_of(dp) == digest_of(fsdp)
  for source, target in ((dp, "fsdp"), (fsdp, "data_parallel")):
    workdir = stopped_at(source, 2, tmp_path / target)
    capsys.readouterr()
    result = train_job("sharded", target, workdir)
    assert "resumed from step 2 (" in capsys.readouterr().out
    assert result["state_digest"] == digest_of(dp)
  # Another strategy's checkpoint is still refused.
  workdir = stopped_at(fsdp, 2, tmp_path / "ensemble")
  assert sharded_train.main(argv_for("ensemble", workdir)) == 2
  assert "strategy 'fsdp' there" in capsys.readouterr().err


def test_an_fsdp_checkpoint_restores_on_4_devices_with_its_digest(
    finished, digits):
  source = finished("legacy_pmap", "fsdp") / "checkpoints"
  config = config_for("fsdp", digits)
  digests = []
  for module, n in ((legacy_fsdp, 8), (sharded_fsdp, 4), (sharded_fsdp, 2)):
    state, _ = handover.resume_into(module, module.make_placement(n), config,
                                    source, step=2, strategy="fsdp")
    digests.append(digest.state_digest(module.to_host(state)))
    if n < 8:  # split over n devices: 1/n of each split leaf on each
      leaf = state.params["Conv_0"]["kernel"]
      assert leaf.addressable_shards[0].data.size == leaf.size // n
  assert len(set(digests)) == 1, digests


def _two_processes(module, workdir, *extra):
  """A 2 x 4 device fsdp job of `python -m module`: linear512, 2 steps."""
  return subprocess.run(
      [sys.executable, "-m", module, "--strategy", "fsdp", "--workload",
       "linear512", "--steps", "2", "--batch-size", "64", "--eval-every", "2",
       "--workdir", str(workdir), "--processes", "2", "--devices", "4",
       *extra], cwd=ROOT, text=True, capture_output=True, timeout=600,
      check=False)


def test_an_fsdp_save_in_two_processes_gathers_nothing(tmp_path):
  """Every save hands Orbax each split leaf as the global array it is (each
  process holding half of it), brings nothing to a host through a gather,
  and a fresh 2-process job, and one process of 8 devices, restore the
  state with its digest."""
  workdir = tmp_path / "job"
  done = _two_processes(probe.MODULE, workdir, "--checkpoint-every", "1")
  assert done.returncode == 0, done.stderr[-3000:]
  saved = digest_of(workdir)
  for process in (0, 1):
    lines = (workdir / f"probe-{process}.jsonl").read_text().splitlines()
    saves = [json.loads(line) for line in lines]
    assert [save["step"] for save in saves] == [1, 2]
    for save in saves:
      split = [leaf for leaf in save["leaves"] if fsdp.shard_axis(
          leaf["shape"], 8) != fsdp.REPLICATED]
      assert len(split) == 3, save  # the kernel, adam's mu and nu of it
      for leaf in split:
        assert leaf["jax_array"] and not leaf["fully_addressable"], leaf
        assert leaf["local_bytes"] * 2 == leaf["bytes"], leaf
      # Orbax gathers a few scalars of its own (64 bytes); not one leaf.
      assert save["gathered"] < min(leaf["bytes"] for leaf in split), save

  again = _two_processes("sharded.train", workdir)
  assert again.returncode == 0, again.stderr[-3000:]
  result = json.loads((workdir / "result.json").read_text())
  assert (result["resumed_from"], result["steps_run"]) == (2, 0)
  assert not result["damaged_checkpoints"]
  assert result["state_digest"] == saved

  config = strategies.get("fsdp").make_config(
      {"workload": "linear512", "steps": 2, "global_batch": 64},
      datasets.load("linear512"))
  state, _ = handover.resume_into(
      sharded_fsdp, sharded_fsdp.make_placement(8), config,
      workdir / "checkpoints", step=2, strategy="fsdp")
  assert digest.state_digest(sharded_fsdp.to_host(state)) == saved
