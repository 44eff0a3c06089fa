"""Many processes: P x D devices against 1 x (P*D) (faults:
tests/test_multiprocess_faults.py).

Every test here starts real worker processes through the programs' own
`--processes` launcher (`shardport.launch.launcher`), on localhost with gloo CPU
collectives, short runs. The 1-process baseline is `--processes 1`: one
worker joined through jax.distributed, so that its all-reduces are gloo's
too and sum in the same order (a plain process sums in another: see
`shardport.launch.distributed.collectives`). After every test no process started by
it is left (`multiprocess_jobs.left_behind`).
"""

import json
import pathlib
import re

import pytest

from shardport.launch import launcher
from tests import multiprocess_jobs as jobs

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Short runs: linreg compiles in a fraction of the CNN's time; the ensemble
# trains only CNNs. One timing window. 2 processes x 2 devices against
# 1 x 4: every path of P x D (several processes, several devices each) at
# two thirds of 2 x 4's time (measured: the ensemble's 76 s to 52 s); fsdp
# and the toy port's mesh keep 2 x 4.
DEVICES = "2"
DEVICES_OF = {"fsdp": "4"}
STRATEGIES = {
    "data_parallel": ["--workload", "linreg", "--steps", "3",
                      "--batch-size", "32"],
    "ensemble": ["--members", "4", "--steps", "2", "--batch-size", "16"],
    "accumulation": ["--workload", "linreg", "--accum-steps", "2",
                     "--steps", "3", "--batch-size", "32"],
    # The CNN: linreg's leaves are too small to split over 8 devices.
    "fsdp": ["--steps", "2", "--batch-size", "32"],
    # A 2 members x 2 data mesh over 2 processes' devices. No pmap run on
    # jax 0.10 (nested pmap raises).
    "ensemble_data": ["--members", "2", "--steps", "2", "--batch-size", "16"],
}


# The ensembles' baseline left out (CI time): in the job itself every
# member is checked against the one-device reference, which trains each
# member on its own, so a member on the wrong device fails there too.
# fsdp's and accumulation's too: in the job their pmap and shard_map runs
# end bitwise equal and pass against the one-device reference; 2 x D
# against 1 x 2D over gloo is data_parallel's check (and the team port's
# below).
BASELINE = ("data_parallel",)


# The classic ensemble left out (CI time: 59 s): its members across
# processes are ensemble_data's too (2 members x 2 data over 2 processes),
# and in one process every member is judged against the reference
# (tests/test_ensemble.py, and `compare ensemble` on the original runtime).
@pytest.mark.parametrize("strategy", [s for s in STRATEGIES
                                      if s != "ensemble"])
def test_two_processes_end_as_one(strategy, tmp_path):
  """2 x D devices end with the 1 x 2D state digests, bitwise, every run
  (the ensembles: pmap, shard_map and the reference agree in the job)."""
  out = tmp_path / "report.json"
  devices = DEVICES_OF.get(strategy, DEVICES)
  # Timed (the windows start together in every process) for one strategy:
  # the others prove their digests only (CI time).
  timed = strategy == "data_parallel"
  with_baseline = strategy in BASELINE
  done = jobs.run("compare", "--strategy", strategy, *STRATEGIES[strategy],
              "--windows", "1" if timed else "0", "--processes", "2",
              "--devices", devices, "--json", out,
              *(["--baseline"] if with_baseline else []))
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(out.read_text())
  assert (report["processes"], report["devices"]) == (2, 2 * int(devices))
  assert report["collectives"] == "gloo"
  assert report["verdict"] == "pass"
  if with_baseline:
    baseline = report["baseline"]
    assert (baseline["processes"], baseline["devices"]) == (
        1, 2 * int(devices))
    assert baseline["verdict"] == "pass"
    assert set(baseline["runs"]) == set(report["runs"])
    for name, run in baseline["runs"].items():
      assert run["same_state_digest"], name
      assert bool(run["examples_per_s"] and run["baseline_examples_per_s"]
                  ) == timed, name
    assert f"against 1 process x {2 * int(devices)} devices" in done.stdout
  else:
    assert "reference" in report["runs"], report["runs"]
  if "pmap" in report["runs"]:
    assert (report["runs"]["pmap"]["state_digest"]
            == report["runs"]["shard_map"]["state_digest"])
  else:
    assert strategy == "ensemble_data", report["skipped_runs"]
  # Printed once, by process 0.
  assert done.stdout.count("verdict: pass") == 1
  assert "[Gloo]" not in done.stdout
  assert not jobs.left_behind(tmp_path)


def test_a_teams_port_in_two_processes_ends_as_one(tmp_path):
  """`--program` under jax.distributed: pmap per process on its rows, the
  port on the mesh over both; the 1-process digests, every run. The ResNet's
  3x3x16x16 convolutions part from 1 x 8 at step 1 by an ulp unless every
  process sizes XLA's thread pool alike (`launcher.worker_env`)."""
  out = tmp_path / "report.json"
  done = jobs.run("compare", "--program", "examples.resnet.prove:port",
              "--steps", "2",
              "--windows", "0", "--processes", "2", "--devices", "4",
              "--baseline", "--json", out)
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(out.read_text())
  assert (report["processes"], report["devices"]) == (2, 8)
  assert report["verdict"] == "pass"
  assert report["baseline"]["same_state_digests"], report["baseline"]
  assert done.stdout.count("verdict: pass") == 1
  assert not jobs.left_behind(tmp_path)


def test_a_step_pmapd_the_new_way_proves_in_two_processes(tmp_path):
  """flax imagenet's `in_axes=(None, 0), out_axes=(None, 0)`: each process
  holds the state on its own devices; the 1-process digests, and a one-step
  mistake fails at its step."""
  out = tmp_path / "report.json"
  flags = ("compare", "--program", "tests.toy_ports:broadcast_pmap_port",
           "--steps", "4", "--windows", "0", "--processes", "2",
           "--devices", "4")
  done = jobs.run(*flags, "--baseline", "--json", out)
  assert done.returncode == 0, done.stderr[-3000:]
  assert json.loads(out.read_text())["baseline"]["same_state_digests"]
  wrong = jobs.run(*flags, "--negative-control", "update-1pct-at:3")
  assert wrong.returncode == 1, wrong.stderr[-3000:]
  assert "verdict: fail, first at step 3: port vs pmap" in wrong.stdout
  assert not jobs.left_behind(tmp_path)


# The replicated layout; ensemble_data's member-sharded lockstep placement
# across processes is judged in test_two_processes_end_as_one (a wrong
# placement fails its verdict there).
@pytest.mark.parametrize("strategy", ["data_parallel"])
def test_a_late_mistake_fails_at_its_step_in_two_processes(strategy,
                                                           tmp_path):
  """The lockstep checks place the shared state across processes: a 1%
  change of the port's update at step 2 only is named at step 2."""
  out = tmp_path / "report.json"
  done = jobs.run("compare", "--strategy", strategy, *STRATEGIES[strategy],
              "--windows", "0", "--processes", "2", "--devices", DEVICES,
              "--negative-control", "update-1pct-at:2", "--json", out)
  assert done.returncode == 1, done.stderr[-3000:]
  report = json.loads(out.read_text())
  assert report["processes"] == 2
  assert report["first_failure"].startswith("first at step 2:")
  assert not jobs.left_behind(tmp_path)


def test_every_worker_and_the_baseline_size_xla_s_thread_pool_alike(
    monkeypatch):
  monkeypatch.delenv("NPROC", raising=False)
  job, single = launcher.worker_env(4, 8), launcher.worker_env(8, 8)
  assert job["NPROC"] == single["NPROC"]
  assert int(job["NPROC"]) >= 8
  monkeypatch.setenv("NPROC", "3")  # The user's own reservation stands.
  assert launcher.worker_env(4, 8)["NPROC"] == "3"


def test_strip_flags():
  assert launcher.strip_flags(
      ["--processes", "2", "--baseline", "--devices=4", "--coordinator=h:1",
       "--steps", "3"], launcher.LAUNCHER_FLAGS) == ["--devices=4", "--steps",
                                                     "3"]


def test_many_hosts_guide_pulls_tagged_code():
  """docs/many-hosts.template.md shows tested code only: every region it names exists."""
  from docs.guide import sources  # pylint: disable=g-import-not-at-top
  text = (ROOT / "docs" / "many-hosts.template.md").read_text()
  directives = re.findall(r"<!--\s*(code|diff):\s*(.*?)\s*-->", text)
  assert len(directives) >= 2
  for kind, args in directives:
    assert "```" in getattr(sources, kind)(ROOT, args), args
