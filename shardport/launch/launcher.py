"""`--processes P`: P local workers of one program, started and supervised.

`python -m compare --processes P --devices D` (and both training programs)
runs the same command P times, each a worker of one `jax.distributed` job
on localhost (`--coordinator 127.0.0.1:PORT --num-processes P --process-id
I`, `shardport.launch.distributed`) with D emulated CPU devices (`JAX_PLATFORMS=cpu`,
`XLA_FLAGS=--xla_force_host_platform_device_count=D`), P x D devices in all.
Nothing else passes between the launcher and its workers: the workers join
through jax.distributed, and the launcher only starts them and waits.

- Process 0's output is shown as it comes (it alone prints the report);
  every worker's output also goes to a log directory, removed when the job
  ends well and named when it does not.
- The first worker that is lost (killed, crashed, aborted) ends the job:
  the launcher kills the others, prints one line naming it (and, for one
  that raised, its error and step, from its own last line) and exits 4.
  A worker that exits with a usage error (2) ends it too, with that
  worker's one line. Otherwise the launcher exits with the
  workers' common exit code.
- No worker outlives the launcher: each asks Linux to kill it when the
  launcher dies (`shardport.launch.distributed.die_with_launcher`), and the
  launcher stops them on every way out, Ctrl-C included.

This module imports no jax.
"""

import contextlib
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from shardport.launch import crash
from shardport.launch import distributed
from shardport.launch import emulation

EXIT_USAGE, EXIT_LOST, EXIT_INTERRUPTED = 2, 4, 130
# How long the others may take to finish once one worker has finished well.
FINISH_GRACE_S = 60
# How long a line of process 0's stderr is held before it is shown: a
# worker lost kills its peers' collectives at once, and their tracebacks
# must not come before the one line that names it.
HOLD_S = 0.5
# Runtime chatter that is not the program's output: gloo's connection
# lines, absl log lines (I/W/E/F1122 12:00:00.000000 pid file:line]), and
# the stack dumps of a worker that aborts.
_NOISE = re.compile(r"^(\[Gloo\]|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+\]|"
                    r"\*\*\* Check failure stack trace|\s+@\s+0x)")


class LaunchError(Exception):
  """The job cannot start (one line, exit 2)."""


def free_port(host: str = "127.0.0.1") -> int:
  """A TCP port that nothing listens on now."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
    probe.bind((host, 0))
    return probe.getsockname()[1]


def strip_flags(argv: list[str], flags: dict[str, int]) -> list[str]:
  """`argv` without `flags` (`{flag: how many values it takes}`)."""
  out, skip = [], 0
  for arg in argv:
    if skip:
      skip -= 1
      continue
    name = arg.split("=", 1)[0]
    if name in flags:
      skip = 0 if "=" in arg else flags[name]
      continue
    out.append(arg)
  return out


LAUNCHER_FLAGS = {"--processes": 1, "--baseline": 0, "--coordinator": 1}


def worker_env(devices: int, job_devices: int) -> dict[str, str]:
  """The environment of a local worker with `devices` emulated CPU devices.

  Args:
    devices: The worker's emulated CPU devices.
    job_devices: The devices of the whole job, all workers together.
  """
  env = dict(os.environ)
  # XLA's CPU client sizes its intra-op thread pool as max(NPROC or the
  # cores, local devices), and Eigen splits a convolution's sums by that
  # size: one pool size for every worker and for the 1-process baseline
  # keeps their bits equal (docs/jax-facts.md, Multi-process).
  env.setdefault("NPROC", str(max(len(os.sched_getaffinity(0)), job_devices)))
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if not f.startswith(emulation.COUNT_FLAG)]
  env["XLA_FLAGS"] = " ".join([*flags, f"{emulation.COUNT_FLAG}={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  env.setdefault("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "gloo")
  env["PYTHONUNBUFFERED"] = "1"
  env[distributed.PARENT_ENV] = str(os.getpid())
  return env


def _describe(rc: int) -> str:
  if rc < 0:
    try:
      return f"killed by {signal.Signals(-rc).name}"
    except ValueError:
      return f"killed by signal {-rc}"
  return f"exited with code {rc}"


def _blame(rc: int, normal) -> int:
  """Who is named when several workers are seen ending at once: killed by
  a signal (not jax's own SIGABRT), failed, aborted, then ended well."""
  if rc < 0 and rc != -signal.SIGABRT:
    return 0
  if rc not in normal and rc != -signal.SIGABRT:
    return 1
  return 2 if rc == -signal.SIGABRT else 3


class _Relay:
  """Copies a worker's stream to a log file and, unless muted, to ours.

  One thread reads without pause (a worker blocked on a full pipe would
  stall the whole job: its peers wait for it in their collectives); another
  shows each line once it is `hold_s` old, unless the job was muted since.
  """

  def __init__(self, stream, log_path, out, job, hold_s=0.0):
    self.stream, self.log_path, self.out, self.job = stream, log_path, out, job
    self.hold_s = hold_s
    self.lines = queue.Queue()
    self.threads = [threading.Thread(target=self._read, daemon=True),
                    threading.Thread(target=self._show, daemon=True)]

  def start(self):
    for thread in self.threads:
      thread.start()

  def join(self, timeout=None):
    for thread in self.threads:
      thread.join(timeout)

  def _read(self):
    with open(self.log_path, "w") as log:
      for line in iter(self.stream.readline, ""):
        log.write(line)
        log.flush()
        if not _NOISE.match(line):
          self.lines.put((time.monotonic(), line))
    self.lines.put((None, None))

  def _show(self):
    while True:
      arrived, line = self.lines.get()
      if line is None:
        return
      time.sleep(max(0.0, arrived + self.hold_s - time.monotonic()))
      if not self.job.muted:
        with self.job.lock:
          self.out.write(line)
          self.out.flush()


class LocalJob:
  """P local workers of one command, and what became of them."""

  def __init__(self, prog, module, argv, processes, devices, coordinator=None,
               normal=(0, 1, 2, 3)):
    self.prog, self.module, self.argv = prog, module, list(argv)
    self.processes, self.devices = processes, devices
    self.coordinator, self.normal = coordinator, normal
    self.muted, self.lock = False, threading.Lock()
    self.procs, self.relays = [], []
    self.logs = None

  def _address(self):
    if not self.coordinator:
      return f"127.0.0.1:{free_port()}"
    _, port = distributed.split_address(self.coordinator)
    if distributed.port_in_use(port):
      raise LaunchError(f"coordinator port {port} is already in use: choose "
                        "another --coordinator HOST:PORT, or leave it out "
                        "for a free one")
    return self.coordinator

  def start(self):
    address = self._address()
    self.logs = tempfile.mkdtemp(prefix=f"shardport-{self.prog}-")
    env = worker_env(self.devices, self.devices * self.processes)
    base = strip_flags(self.argv, LAUNCHER_FLAGS)
    for i in range(self.processes):
      command = [sys.executable, "-m", self.module, *base,
                 "--coordinator", address, "--num-processes",
                 str(self.processes), "--process-id", str(i)]
      log = lambda kind, i=i: os.path.join(self.logs, f"process-{i}.{kind}")
      if i == 0:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.relays = [_Relay(proc.stdout, log("out"), sys.stdout, self),
                       _Relay(proc.stderr, log("err"), sys.stderr, self,
                              hold_s=HOLD_S)]
        for relay in self.relays:
          relay.start()
      else:
        with open(log("out"), "w") as out, open(log("err"), "w") as err:
          proc = subprocess.Popen(command, env=env, stdout=out, stderr=err,
                                  start_new_session=True)
      self.procs.append(proc)

  def stop(self):
    """Kills every worker still running (SIGKILL) and waits for it.

    Not SIGTERM: jax.distributed takes SIGTERM for a preemption notice and
    carries on; a job that lost a worker has nothing left to save.
    """
    alive = [proc for proc in self.procs if proc.poll() is None]
    if alive and self.logs:
      for proc in alive:  # each dumps its Python stacks into its log
        with contextlib.suppress(ProcessLookupError):
          proc.send_signal(signal.SIGUSR1)
      time.sleep(0.5)
    for proc in alive:
      with contextlib.suppress(ProcessLookupError):
        proc.kill()
    for proc in self.procs:
      proc.wait()

  def _say(self, line):
    self.muted = True
    with self.lock:
      print(f"{self.prog}: error: {line}", file=sys.stderr, flush=True)

  def _error_line(self, i):
    """Worker `i`'s last line on stderr (its one-line error)."""
    if i == 0:
      for relay in self.relays:
        relay.join(timeout=5)
      return None  # already shown
    return self._last_line(i)

  def _last_line(self, i):
    """Worker `i`'s last line on stderr in its log, runtime noise left out."""
    with open(os.path.join(self.logs, f"process-{i}.err")) as err:
      lines = [l.rstrip("\n") for l in err if l.strip() and
               not _NOISE.match(l)]
    return lines[-1] if lines else None

  def _lost(self, i, seconds) -> int:
    """Stops the job for worker `i`, ended abnormally; names it; exits 4.

    A worker that raised (exit 4, `shardport.launch.crash`) is named with
    its own line's error and step, read once the job is stopped: its peers
    sit in their next collective and must not be waited for.
    """
    proc, others = self.procs[i], self.processes - 1
    self.muted = True
    self.stop()
    for relay in self.relays:
      relay.join(timeout=5)
    said = self._last_line(i) if proc.returncode == crash.EXIT_CRASH else None
    what = f": {crash.what(said)}" if said and crash.CRASHED in said else ""
    verb = "process" if what else "lost process"
    self._say(f"{verb} {i} of {self.processes} (pid {proc.pid}, "
              f"{_describe(proc.returncode)}) after {seconds:.1f} s{what}; "
              f"stopped the other{'s' if others > 1 else ''}; logs in "
              f"{self.logs}")
    return EXIT_LOST

  def supervise(self) -> int:
    """Waits for every worker; returns the job's exit code."""
    start = time.monotonic()
    codes, first_done = {}, None
    while len(codes) < len(self.procs):
      ended = [i for i, proc in enumerate(self.procs)
               if i not in codes and proc.poll() is not None]
      # Several seen ending at once: the one killed from outside first, as
      # its peers die of its loss (gloo errors, jax's SIGABRT) right after.
      ended.sort(key=lambda i: _blame(self.procs[i].returncode, self.normal))
      for i in ended:
        proc = self.procs[i]
        rc = codes[i] = proc.returncode
        if rc == EXIT_USAGE and EXIT_USAGE in self.normal:
          line = self._error_line(i)
          self.muted = True
          self.stop()
          if line:
            print(line, file=sys.stderr, flush=True)
          return EXIT_USAGE
        if rc not in self.normal:
          return self._lost(i, time.monotonic() - start)
        first_done = first_done or time.monotonic()
      if first_done and time.monotonic() - first_done > FINISH_GRACE_S:
        late = [i for i in range(self.processes) if i not in codes]
        self._say(f"process {late[0]} of {self.processes} (pid "
                  f"{self.procs[late[0]].pid}) did not finish within "
                  f"{FINISH_GRACE_S} s of the others; stopped it; logs in "
                  f"{self.logs}")
        self.stop()
        return EXIT_LOST
      time.sleep(0.05)
    for relay in self.relays:
      relay.join(timeout=5)
    if len(set(codes.values())) > 1:
      self._say(f"the processes disagree: exit codes {codes}; logs in "
                f"{self.logs}")
      return EXIT_LOST
    shutil.rmtree(self.logs, ignore_errors=True)
    return codes[0]


def _on_sigterm(signum, frame):
  del frame
  raise SystemExit(128 + signum)


def launch(prog: str, module: str, argv: list[str], processes: int,
           devices: int, coordinator: str | None = None,
           normal=(0, 1, 2, 3)) -> int:
  """Runs `python -m module argv` as `processes` local workers; supervises.

  Args:
    prog: the program's name in messages (`compare`, `train`).
    module: what `python -m` runs in each worker.
    argv: the command line as given (launcher flags are removed).
    processes: how many workers.
    devices: emulated CPU devices per worker.
    coordinator: `HOST:PORT` to use; a free localhost port if None.
    normal: the exit codes a worker ends with on its own (others: lost).

  Returns:
    The workers' common exit code; 2 when the job could not start or a
    worker reported bad usage; 4 when a worker was lost; 130 on Ctrl-C.
  """
  job = LocalJob(prog, module, argv, processes, devices, coordinator, normal)
  previous = None
  if threading.current_thread() is threading.main_thread():
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
  try:
    job.start()
    return job.supervise()
  except LaunchError as err:
    print(f"{prog}: error: {err}", file=sys.stderr)
    return EXIT_USAGE
  except KeyboardInterrupt:
    job.muted = True
    print(f"{prog}: interrupted; stopped every process", file=sys.stderr)
    return EXIT_INTERRUPTED
  finally:
    job.stop()
    if previous is not None:
      signal.signal(signal.SIGTERM, previous)


def run_single(module: str, argv: list[str], devices: int, log: str) -> int:
  """`python -m module argv --processes 1 --devices N`, its output to `log`.

  The baseline a multi-process job is measured against: one process with
  all the devices, joined through jax.distributed like the job's workers,
  so that its collectives are gloo's too and sum in the same order.
  """
  command = [sys.executable, "-m", module, *strip_flags(argv, LAUNCHER_FLAGS),
             "--processes", "1", "--devices", str(devices)]
  with open(log, "w") as out:
    proc = subprocess.Popen(command, env=worker_env(devices, devices), stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
      return proc.wait()
    finally:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
