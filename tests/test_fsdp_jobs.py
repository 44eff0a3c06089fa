"""fsdp's training jobs: a data_parallel job goes on as fsdp and back, and
an fsdp checkpoint restores on fewer devices with its digest."""

from legacy_pmap import fsdp as legacy_fsdp
from sharded import fsdp as sharded_fsdp
from sharded import train as sharded_train
from tests.training_jobs import argv_for
from tests.training_jobs import compile_once  # pylint: disable=unused-import (autouse)
from tests.training_jobs import config_for
from tests.training_jobs import digest_of
from tests.training_jobs import finished  # pylint: disable=unused-import (a fixture)
from tests.training_jobs import stopped_at
from tests.training_jobs import train_job
from shardport.training import handover
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
