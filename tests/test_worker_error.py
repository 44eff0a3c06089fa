"""A step that raises on one process of two: the job ends within seconds.

Measured (2 cores, shared): each job 9-15 s in all, every process of the
training job gone about 1 s after the raise; the prover's about 7-10 s
after it, since the process that raised first waits up to
`runner.RAISED_EVERYWHERE_S` (8 s) for its peers to raise at the same step
(then the raise is the port's verdict, exit 1, on every process:
tests/test_rewrite_many_hosts.py); the file about 35 s of CI. The raise is
planted by `tests/fault_plant/sitecustomize.py` (`SHARDPORT_PLANT_RAISE`:
process 1's step 2), imported by every process of the job from
`PYTHONPATH`; the programs themselves are unchanged.
"""

import os
import pathlib
import subprocess
import sys
import time

import pytest

from shardport.launch import crash
from shardport.launch import launcher

ROOT = pathlib.Path(__file__).resolve().parents[1]
PLANT_PATH = ROOT / "tests" / "fault_plant"
# A raise seen by the launcher ends the job at once; without that, a worker
# waits in jax.distributed's shutdown barrier (30 s on localhost) or its
# peers in their next collective (past 300 s). The prover's wait for its
# peers' raise (8 s) and a loaded machine's start-up fit under it.
END_S = 20
JOBS = {
    "train": ["sharded.train", "--strategy", "data_parallel", "--workload",
              "linreg", "--batch-size", "32", "--steps", "4"],
    "compare": ["compare", "--strategy", "data_parallel", "--workload",
                "linreg", "--batch-size", "32", "--steps", "4",
                "--windows", "0"],
}
# The raise, and where each names it: the training loop's note, the
# runner's (in a port's run: a port's raise is a verdict in one process).
PLANT = {"train": "1:2", "compare": "1:2:shard_map"}
STEP = {"train": "(at step 2;", "compare": "(in shard_map's step 2;"}


def _env(prog, raised_at):
  env = {name: value for name, value in os.environ.items() if not
         name.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
  env.update(PYTHONPATH=os.pathsep.join([str(PLANT_PATH), str(ROOT)]),
             SHARDPORT_PLANT_RAISE=PLANT[prog],
             SHARDPORT_PLANT_RAISED_AT=str(raised_at))
  return env


@pytest.mark.parametrize("prog", ["train", "compare"])
def test_a_step_raising_on_one_process_ends_the_job(prog, tmp_path):
  """Every process ends within END_S of the raise; one line names process
  1, the step and the error; exit 4."""
  raised_at = tmp_path / "raised_at"
  argv = [*JOBS[prog], "--processes", "2", "--devices", "4"]
  if prog == "train":
    argv += ["--workdir", str(tmp_path / "work")]
  done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT,
                        env=_env(prog, raised_at), text=True,
                        capture_output=True, timeout=300, check=False)
  ended = time.time()
  assert done.returncode == launcher.EXIT_LOST, done.stderr[-3000:]
  errors = [l for l in done.stderr.splitlines() if f"{prog}: error: " in l]
  assert len(errors) == 1, done.stderr[-3000:]
  assert errors[0].startswith(f"{prog}: error: process 1 of 2 "), errors
  assert "RuntimeError: planted fault" in errors[0], errors
  assert STEP[prog] in errors[0], errors
  seconds = ended - float(raised_at.read_text())
  print(f"{prog}: ended {seconds:.2f} s after the raise")
  assert seconds < END_S, seconds
  assert "Traceback" not in done.stderr
  assert not _left_behind(tmp_path)


def _left_behind(marker) -> list[str]:
  """Live processes whose environment names `marker` (the job's tmp path)."""
  found = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
      continue
    if str(marker).encode() in environ and int(pid) != os.getpid():
      found.append(pid)
  return found


def test_one_process_crash_line_names_the_step(tmp_path, capsys, monkeypatch):
  """In one process too: the traceback, then one line with the error and
  its step; exit 4 (not a usage error, not Python's 1)."""
  from sharded import train  # pylint: disable=g-import-not-at-top
  from shardport.training import dispatch  # pylint: disable=g-import-not-at-top
  real = dispatch.optimizer_step

  def optimizer_step(step, calls):
    taken, inner = [0], real(step, calls)

    def planted(state, batch):
      taken[0] += 1
      if taken[0] == 2:
        raise RuntimeError("planted fault")
      return inner(state, batch)
    return planted

  monkeypatch.setattr(dispatch, "optimizer_step", optimizer_step)
  code = train.main([*JOBS["train"][1:], "--devices", "2", "--workdir",
                     str(tmp_path / "work")])
  err = capsys.readouterr().err
  assert code == crash.EXIT_CRASH, err[-2000:]
  assert "Traceback" in err
  assert err.splitlines()[-1] == ("train: crashed: RuntimeError: planted "
                                  "fault (at step 2; exit 4)")


def test_the_launcher_quotes_a_crash_line_without_its_program():
  line = crash.line("train", _noted(ValueError("bad\nmore"), "at step 3"))
  assert line == "train: crashed: ValueError: bad (at step 3; exit 4)"
  assert crash.what(line) == "ValueError: bad (at step 3; exit 4)"
  assert crash.what("something else") == "something else"


def _noted(err, note):
  err.add_note(note)
  return err
