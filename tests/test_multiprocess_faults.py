"""Faults in many processes never hang a job: a worker killed mid-run ends
every process at once and a restarted job resumes to the same digest; a
coordinator's port taken or unreachable, and bad process options, are one
line and exit 2. After every test no process started by it is left
(`multiprocess_jobs.left_behind`)."""

import json
import socket
import subprocess
import time

import pytest

from compare._src import cli
from shardport.launch import launcher
from tests import multiprocess_jobs as jobs

TRAIN = ["--strategy", "data_parallel", "--workload", "linreg",
         "--batch-size", "32", "--checkpoint-every", "2", "--eval-every", "2"]
# The fault tests' bound: every process gone this long after the kill.
FAULT_S = 60


def test_training_program_matches_one_process_and_resumes_after_a_kill(
    tmp_path):
  """sharded.train 2 x 4 ends as 1 x 8; legacy_pmap.train killed mid-run
  ends every process at once and resumes to the same digest."""
  whole = tmp_path / "whole"
  done = jobs.run("sharded.train", *TRAIN, "--steps", "6", "--workdir", whole,
              "--processes", "2", "--devices", "4", "--baseline")
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads((whole / "result.json").read_text())
  assert result["processes"] == 2 and result["devices"] == 8
  assert result["baseline"]["same_state_digests"]
  # One checkpoint per step, written together: no per-process copies.
  assert sorted(p.name for p in (whole / "checkpoints").iterdir()) == [
      "2", "4", "6"]
  assert len((whole / "metrics.jsonl").read_text().splitlines()) == 3

  # The same job under the pmap program, its process 1 killed after step 4.
  killed = tmp_path / "killed"
  argv = jobs.command("legacy_pmap.train", *TRAIN, "--steps", "6", "--workdir",
                  killed, "--processes", "2", "--devices", "4")
  job = subprocess.Popen(argv, cwd=jobs.ROOT, env=jobs.ENV, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  try:
    for line in job.stdout:
      if line.startswith("step 4 "):
        break
    victim = jobs.workers(job.pid)[1]
    stdout, stderr, seconds = jobs.kill_and_wait(job, victim, FAULT_S)
  finally:
    if job.poll() is None:
      job.kill()
  assert job.returncode == launcher.EXIT_LOST, stderr[-3000:]
  assert seconds < FAULT_S
  assert jobs.errors(stderr) == [next(l for l in stderr.splitlines()
                                  if "lost process 1 of 2" in l)], stderr
  assert f"pid {victim}, killed by SIGKILL" in stderr
  assert "Traceback" not in stderr + stdout
  assert not (killed / "result.json").exists()
  assert not jobs.left_behind(tmp_path)

  # Started again, it resumes from its last complete checkpoint.
  again = jobs.run("legacy_pmap.train", *TRAIN, "--steps", "6", "--workdir",
               killed, "--processes", "2", "--devices", "4")
  assert again.returncode == 0, again.stderr[-3000:]
  resumed = json.loads((killed / "result.json").read_text())
  assert resumed["resumed_from"] in (2, 4)
  assert resumed["state_digest"] == result["state_digest"]
  assert not jobs.left_behind(tmp_path)


def test_compare_killed_worker_ends_the_job(tmp_path):
  """compare: a worker kill -9ed mid-run ends every process at once, one
  line names it, and no report is written."""
  out = tmp_path / "report.json"
  job = subprocess.Popen(
      jobs.command("compare", "--strategy", "data_parallel", "--workload",
               "linreg", "--steps", "100000", "--batch-size", "32",
               "--processes", "2", "--devices", "4", "--json", out),
      cwd=jobs.ROOT, env=jobs.ENV, text=True, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE)
  try:
    deadline = time.monotonic() + 300
    victim = None
    while victim is None and time.monotonic() < deadline:
      victim = jobs.workers(job.pid).get(1)
      time.sleep(0.2)
    # Mid-run: once process 1 has computed for a while (past its imports).
    while jobs.cpu_seconds(victim) < 10 and time.monotonic() < deadline:
      time.sleep(0.5)
    _, stderr, seconds = jobs.kill_and_wait(job, victim, FAULT_S)
  finally:
    if job.poll() is None:
      job.kill()
  assert job.returncode == launcher.EXIT_LOST, stderr[-3000:]
  assert seconds < FAULT_S
  assert len(jobs.errors(stderr)) == 1 and "lost process 1 of 2" in stderr
  assert not out.exists()
  assert not list(tmp_path.glob("*.tmp"))
  assert not jobs.left_behind(tmp_path)


@pytest.fixture
def busy_port():
  """A localhost port something else already listens on."""
  with socket.socket() as held:
    held.bind(("127.0.0.1", 0))
    held.listen()
    yield held.getsockname()[1]


def test_coordinator_port_in_use(busy_port, tmp_path):
  """The launcher and a worker given a taken port: one line, exit 2."""
  out = tmp_path / "report.json"
  for extra in (["--processes", "2", "--devices", "4"],
                ["--num-processes", "2", "--process-id", "0"]):
    start = time.monotonic()
    done = jobs.run("compare", "--strategy", "data_parallel", "--steps", "1",
                "--coordinator", f"127.0.0.1:{busy_port}", *extra,
                "--json", out, timeout=120)
    assert done.returncode == cli.EXIT_USAGE, done.stderr[-2000:]
    assert jobs.errors(done.stderr) == [done.stderr.strip()]
    assert f"port {busy_port} is already in use" in done.stderr
    assert time.monotonic() - start < 60
    assert not out.exists()
  assert not jobs.left_behind(tmp_path)


def test_unreachable_coordinator(tmp_path):
  """A worker whose coordinator never answers: one line, exit 2, after
  --init-timeout."""
  port = launcher.free_port()
  start = time.monotonic()
  done = jobs.run("compare", "--strategy", "data_parallel", "--coordinator",
              f"127.0.0.1:{port}", "--num-processes", "2", "--process-id",
              "1", "--init-timeout", "3", "--json", tmp_path / "r.json",
              timeout=120)
  assert done.returncode == cli.EXIT_USAGE, done.stderr[-2000:]
  assert jobs.errors(done.stderr) == [done.stderr.strip()]
  assert "unreachable" in done.stderr and "3 s" in done.stderr
  assert time.monotonic() - start < 60


@pytest.mark.parametrize("argv, message", [
    (["--processes", "2", "--process-id", "0"], "one or the other"),
    (["--coordinator", "127.0.0.1:1234"], "needs all of"),
    (["--coordinator", "nohost", "--num-processes", "2", "--process-id",
      "0"], "HOST:PORT"),
    (["--num-processes", "2", "--process-id", "2", "--coordinator",
      "127.0.0.1:1"], "--process-id must be in [0, 2)"),
    (["--baseline"], "--baseline needs --processes 2 or more"),
    (["--processes", "0"], "--processes must be at least 1"),
])
def test_process_options_checked_first(argv, message, capsys):
  """Bad process options: one line, exit 2, before anything starts."""
  assert cli.main(["--strategy", "data_parallel", *argv]) == cli.EXIT_USAGE
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and message in err, err
