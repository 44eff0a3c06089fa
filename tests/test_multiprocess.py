"""Many processes: P x D devices against 1 x (P*D), and faults that never hang.

Every test here starts real worker processes through the programs' own
`--processes` launcher (`shardport.launch.launcher`), on localhost with gloo CPU
collectives, short runs. The 1-process baseline is `--processes 1`: one
worker joined through jax.distributed, so that its all-reduces are gloo's
too and sum in the same order (a plain process sums in another: see
`shardport.launch.distributed.collectives`). After every test no process started by
it is left (`_left_behind`).
"""

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from compare._src import cli
from shardport.launch import launcher

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
TRAIN = ["--strategy", "data_parallel", "--workload", "linreg",
         "--batch-size", "32", "--checkpoint-every", "2", "--eval-every", "2"]
# The fault tests' bound: every process gone this long after the kill.
FAULT_S = 60
# Without the suite's compilation cache (tests/conftest.py): these jobs
# check that every process compiles alike and sizes XLA's thread pool alike
# (`launcher.worker_env`), which an executable loaded from a cache that
# another process compiled would stand in for.
ENV = {name: value for name, value in os.environ.items() if not
       name.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}


def _command(module, *args):
  return [sys.executable, "-m", module, *map(str, args)]


def _run(module, *args, timeout=600):
  return subprocess.run(_command(module, *args), cwd=ROOT, env=ENV,
                        text=True, capture_output=True, timeout=timeout,
                        check=False)


def _left_behind(marker) -> list[str]:
  """Command lines of live processes that mention `marker` (a tmp path)."""
  found = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
      continue
    if str(marker).encode() in cmdline and int(pid) != os.getpid():
      found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
  return found


def _errors(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if ": error: " in line]


def _workers(launcher_pid) -> dict[int, int]:
  """`{process id: pid}` of a launcher's workers (from their command lines)."""
  workers = {}
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
      args = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError, ValueError):
      continue
    if ppid == launcher_pid and b"--process-id" in args:
      workers[int(args[args.index(b"--process-id") + 1])] = int(pid)
  return workers


def _kill_and_wait(job, victim):
  """SIGKILLs worker `victim`; the launcher's output and seconds to exit."""
  os.kill(victim, signal.SIGKILL)
  killed_at = time.monotonic()
  stdout, stderr = job.communicate(timeout=FAULT_S)
  return stdout, stderr, time.monotonic() - killed_at


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
  done = _run("compare", "--strategy", strategy, *STRATEGIES[strategy],
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
  assert not _left_behind(tmp_path)


def test_a_teams_port_in_two_processes_ends_as_one(tmp_path):
  """`--program` under jax.distributed: pmap per process on its rows, the
  port on the mesh over both; the 1-process digests, every run. The ResNet's
  3x3x16x16 convolutions part from 1 x 8 at step 1 by an ulp unless every
  process sizes XLA's thread pool alike (`launcher.worker_env`)."""
  out = tmp_path / "report.json"
  done = _run("compare", "--program", "examples.resnet.prove:port",
              "--steps", "2",
              "--windows", "0", "--processes", "2", "--devices", "4",
              "--baseline", "--json", out)
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(out.read_text())
  assert (report["processes"], report["devices"]) == (2, 8)
  assert report["verdict"] == "pass"
  assert report["baseline"]["same_state_digests"], report["baseline"]
  assert done.stdout.count("verdict: pass") == 1
  assert not _left_behind(tmp_path)


def test_a_step_pmapd_the_new_way_proves_in_two_processes(tmp_path):
  """flax imagenet's `in_axes=(None, 0), out_axes=(None, 0)`: each process
  holds the state on its own devices; the 1-process digests, and a one-step
  mistake fails at its step."""
  out = tmp_path / "report.json"
  flags = ("compare", "--program", "tests.toy_ports:broadcast_pmap_port",
           "--steps", "4", "--windows", "0", "--processes", "2",
           "--devices", "4")
  done = _run(*flags, "--baseline", "--json", out)
  assert done.returncode == 0, done.stderr[-3000:]
  assert json.loads(out.read_text())["baseline"]["same_state_digests"]
  wrong = _run(*flags, "--negative-control", "update-1pct-at:3")
  assert wrong.returncode == 1, wrong.stderr[-3000:]
  assert "verdict: fail, first at step 3: port vs pmap" in wrong.stdout
  assert not _left_behind(tmp_path)


# The replicated layout; ensemble_data's member-sharded lockstep placement
# across processes is judged in test_two_processes_end_as_one (a wrong
# placement fails its verdict there).
@pytest.mark.parametrize("strategy", ["data_parallel"])
def test_a_late_mistake_fails_at_its_step_in_two_processes(strategy,
                                                           tmp_path):
  """The lockstep checks place the shared state across processes: a 1%
  change of the port's update at step 2 only is named at step 2."""
  out = tmp_path / "report.json"
  done = _run("compare", "--strategy", strategy, *STRATEGIES[strategy],
              "--windows", "0", "--processes", "2", "--devices", DEVICES,
              "--negative-control", "update-1pct-at:2", "--json", out)
  assert done.returncode == 1, done.stderr[-3000:]
  report = json.loads(out.read_text())
  assert report["processes"] == 2
  assert report["first_failure"].startswith("first at step 2:")
  assert not _left_behind(tmp_path)


def test_training_program_matches_one_process_and_resumes_after_a_kill(
    tmp_path):
  """sharded.train 2 x 4 ends as 1 x 8; legacy_pmap.train killed mid-run
  ends every process at once and resumes to the same digest."""
  whole = tmp_path / "whole"
  done = _run("sharded.train", *TRAIN, "--steps", "6", "--workdir", whole,
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
  argv = _command("legacy_pmap.train", *TRAIN, "--steps", "6", "--workdir",
                  killed, "--processes", "2", "--devices", "4")
  job = subprocess.Popen(argv, cwd=ROOT, env=ENV, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  try:
    for line in job.stdout:
      if line.startswith("step 4 "):
        break
    victim = _workers(job.pid)[1]
    stdout, stderr, seconds = _kill_and_wait(job, victim)
  finally:
    if job.poll() is None:
      job.kill()
  assert job.returncode == launcher.EXIT_LOST, stderr[-3000:]
  assert seconds < FAULT_S
  assert _errors(stderr) == [next(l for l in stderr.splitlines()
                                  if "lost process 1 of 2" in l)], stderr
  assert f"pid {victim}, killed by SIGKILL" in stderr
  assert "Traceback" not in stderr + stdout
  assert not (killed / "result.json").exists()
  assert not _left_behind(tmp_path)

  # Started again, it resumes from its last complete checkpoint.
  again = _run("legacy_pmap.train", *TRAIN, "--steps", "6", "--workdir",
               killed, "--processes", "2", "--devices", "4")
  assert again.returncode == 0, again.stderr[-3000:]
  resumed = json.loads((killed / "result.json").read_text())
  assert resumed["resumed_from"] in (2, 4)
  assert resumed["state_digest"] == result["state_digest"]
  assert not _left_behind(tmp_path)


def test_compare_killed_worker_ends_the_job(tmp_path):
  """compare: a worker kill -9ed mid-run ends every process at once, one
  line names it, and no report is written."""
  out = tmp_path / "report.json"
  job = subprocess.Popen(
      _command("compare", "--strategy", "data_parallel", "--workload",
               "linreg", "--steps", "100000", "--batch-size", "32",
               "--processes", "2", "--devices", "4", "--json", out),
      cwd=ROOT, env=ENV, text=True, stdout=subprocess.PIPE,
      stderr=subprocess.PIPE)
  try:
    deadline = time.monotonic() + 300
    victim = None
    while victim is None and time.monotonic() < deadline:
      victim = _workers(job.pid).get(1)
      time.sleep(0.2)
    # Mid-run: once process 1 has computed for a while (past its imports).
    while _cpu_seconds(victim) < 10 and time.monotonic() < deadline:
      time.sleep(0.5)
    _, stderr, seconds = _kill_and_wait(job, victim)
  finally:
    if job.poll() is None:
      job.kill()
  assert job.returncode == launcher.EXIT_LOST, stderr[-3000:]
  assert seconds < FAULT_S
  assert len(_errors(stderr)) == 1 and "lost process 1 of 2" in stderr
  assert not out.exists()
  assert not list(tmp_path.glob("*.tmp"))
  assert not _left_behind(tmp_path)


def _cpu_seconds(pid) -> float:
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    done = _run("compare", "--strategy", "data_parallel", "--steps", "1",
                "--coordinator", f"127.0.0.1:{busy_port}", *extra,
                "--json", out, timeout=120)
    assert done.returncode == cli.EXIT_USAGE, done.stderr[-2000:]
    assert _errors(done.stderr) == [done.stderr.strip()]
    assert f"port {busy_port} is already in use" in done.stderr
    assert time.monotonic() - start < 60
    assert not out.exists()
  assert not _left_behind(tmp_path)


def test_unreachable_coordinator(tmp_path):
  """A worker whose coordinator never answers: one line, exit 2, after
  --init-timeout."""
  port = launcher.free_port()
  start = time.monotonic()
  done = _run("compare", "--strategy", "data_parallel", "--coordinator",
              f"127.0.0.1:{port}", "--num-processes", "2", "--process-id",
              "1", "--init-timeout", "3", "--json", tmp_path / "r.json",
              timeout=120)
  assert done.returncode == cli.EXIT_USAGE, done.stderr[-2000:]
  assert _errors(done.stderr) == [done.stderr.strip()]
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
