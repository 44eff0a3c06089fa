"""Starting and watching the multi-process jobs the tests run: each a
real `--processes` launcher on localhost (tests/test_multiprocess.py,
tests/test_multiprocess_faults.py)."""

import os
import pathlib
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Without the suite's compilation cache (tests/conftest.py): these jobs
# check that every process compiles alike and sizes XLA's thread pool alike
# (`launcher.worker_env`), which an executable loaded from a cache that
# another process compiled would stand in for.
ENV = {name: value for name, value in os.environ.items() if not
       name.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}


def command(module, *args):
  """`python -m module args...`, each argument a string."""
  return [sys.executable, "-m", module, *map(str, args)]


def run(module, *args, timeout=600):
  """`command` run to its end from the repository, without the suite's
  compilation cache; its output captured."""
  return subprocess.run(command(module, *args), cwd=ROOT, env=ENV,
                        text=True, capture_output=True, timeout=timeout,
                        check=False)


def left_behind(marker) -> list[str]:
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


def errors(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if ": error: " in line]


def workers(launcher_pid) -> dict[int, int]:
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


def kill_and_wait(job, victim, timeout):
  """SIGKILLs worker `victim`; the launcher's output and seconds to exit."""
  os.kill(victim, signal.SIGKILL)
  killed_at = time.monotonic()
  stdout, stderr = job.communicate(timeout=timeout)
  return stdout, stderr, time.monotonic() - killed_at


def cpu_seconds(pid) -> float:
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
