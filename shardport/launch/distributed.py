"""Joining a multi-process job with `jax.distributed`, and failing in one line.

Every shardport program (`python -m compare`, `python -m legacy_pmap.train`,
`python -m sharded.train`) is one worker of a job when it is given
`--coordinator HOST:PORT --num-processes P --process-id I` (what the local
launcher, `shardport.launch.launcher`, passes each worker), or `--distributed` alone
(then `jax.distributed.initialize()` detects SLURM, Cloud TPU or Kubernetes
itself). `join` calls `jax.distributed.initialize` with timeouts that are
short on localhost, so that no fault hangs:

- a coordinator port already in use: process 0 cannot start its service;
  one line, exit 2, at once;
- a coordinator that nothing answers on: the other workers wait up to
  `--init-timeout` seconds for it to accept a connection, then one line and
  exit 2 (jax itself would abort the process, SIGABRT, after the same time);
- a worker lost mid-run: the coordination service misses its heartbeats
  for `--heartbeat-timeout` seconds and aborts every other worker (SIGABRT,
  exit 134); the local launcher stops them at once and names the lost one.

Nothing here imports jax at module level: the launcher imports this module
before any device count is set.
"""

import errno
import os
import socket
import sys
import time

from shardport.launch import options

# region: timeouts
# Defaults on localhost (the launcher's workers, tests): a fault must end the
# job within seconds, and every worker starts within seconds of the others.
LOCAL_TIMEOUTS = {"init": 30, "heartbeat": 10, "shutdown": 30}
# Elsewhere jax's own defaults: a cluster's workers may start minutes apart.
CLUSTER_TIMEOUTS = {"init": 300, "heartbeat": 100, "shutdown": 300}
# endregion
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
# How long a process waits at a barrier for the others (a lost process ends
# the job sooner: heartbeats).
BARRIER_TIMEOUT_S = 600
# Set by the launcher in each worker's environment: the launcher's pid.
PARENT_ENV = "SHARDPORT_LAUNCHER_PID"


class JoinError(options.UsageError):
  """This process cannot join the job (one line, exit 2)."""


def is_worker(args) -> bool:
  """Whether `args` make this process one worker of a multi-process job."""
  return bool(args.distributed or args.process_id is not None
              or args.num_processes is not None
              or (args.coordinator and args.processes is None))


def is_launcher(args) -> bool:
  """Whether `args` ask this process to launch local workers.

  `--processes 1` too: one worker joined through jax.distributed, whose
  collectives are gloo's like a many-process job's (the baseline that job is
  compared against bitwise); without `--processes` the program runs here,
  with XLA's in-process collectives.
  """
  return args.processes is not None


def check(args) -> None:
  """Raises UsageError for process options that do not go together."""
  if args.processes is not None and (
      args.distributed or args.process_id is not None
      or args.num_processes is not None):
    raise options.UsageError(
        "--processes launches local workers; --num-processes, --process-id "
        "and --distributed join a job launched elsewhere: give one or the "
        "other")
  if args.baseline and not (args.processes and args.processes > 1):
    raise options.UsageError("--baseline needs --processes 2 or more")
  explicit = (args.coordinator, args.num_processes, args.process_id)
  if args.processes is None and any(x is not None for x in explicit) and (
      None in explicit):
    raise options.UsageError(
        "a worker of a job launched elsewhere needs all of --coordinator "
        "HOST:PORT, --num-processes P and --process-id I (or --distributed "
        "alone, where jax.distributed detects the cluster)")
  if args.process_id is not None and args.num_processes is not None and not (
      0 <= args.process_id < args.num_processes):
    raise options.UsageError(
        f"--process-id must be in [0, {args.num_processes}), got "
        f"{args.process_id}")
  if args.coordinator:
    split_address(args.coordinator)


def split_address(address: str) -> tuple[str, int]:
  """`(host, port)` of `HOST:PORT`; raises UsageError if malformed."""
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise options.UsageError(
        f"--coordinator must be HOST:PORT, got {address!r}")
  return host.strip("[]"), int(port)


def timeouts(args) -> dict[str, int]:
  """`{"init", "heartbeat", "shutdown"}` seconds: the flags, else defaults
  (short when the coordinator is on this machine)."""
  host = split_address(args.coordinator)[0] if args.coordinator else None
  defaults = LOCAL_TIMEOUTS if host in LOCAL_HOSTS else CLUSTER_TIMEOUTS
  given = {"init": args.init_timeout, "heartbeat": args.heartbeat_timeout,
           "shutdown": args.shutdown_timeout}
  return {k: given[k] or defaults[k] for k in defaults}


def die_with_launcher() -> None:
  """Exits now if the launcher that started this worker is gone, and asks
  Linux to kill this worker when the launcher dies: no orphan survives it."""
  parent = os.environ.get(PARENT_ENV)
  if not parent:
    return
  # Where a worker was when its job failed: the launcher sends SIGUSR1
  # before it kills the survivors, and their stacks land in its logs.
  import faulthandler  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  faulthandler.register(signal.SIGUSR1, all_threads=True)
  if sys.platform.startswith("linux"):
    import ctypes  # pylint: disable=g-import-not-at-top
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
  if os.getppid() != int(parent):
    sys.exit(1)


def quiet_native_stdout() -> None:
  """In a launched worker: native code's stdout (gloo's connection lines)
  to /dev/null, Python's `print` still to the launcher.

  gloo writes through C++'s buffered stdout, whose chunks would split into
  the report's lines; Python's own output keeps the original descriptor.
  """
  if not os.environ.get(PARENT_ENV):
    return
  sys.stdout.flush()
  mine = os.dup(1)
  with open(os.devnull, "w") as null:
    os.dup2(null.fileno(), 1)
  sys.stdout = os.fdopen(mine, "w", buffering=1)


def port_in_use(port: int) -> bool:
  """Whether something already listens on (or holds) TCP `port` here."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
    try:
      probe.bind(("", port))
    except OSError as err:
      return err.errno == errno.EADDRINUSE
  return False


def wait_reachable(host: str, port: int, seconds: float) -> bool:
  """Whether `host:port` accepts a TCP connection within `seconds`."""
  deadline = time.monotonic() + seconds
  while True:
    try:
      with socket.create_connection((host, port), timeout=2):
        return True
    except OSError:
      if time.monotonic() >= deadline:
        return False
      time.sleep(0.2)


def _first_line(err: BaseException) -> str:
  lines = str(err).strip().splitlines()
  return lines[0][:200] if lines else type(err).__name__


def join(args) -> None:
  """Joins the job: `jax.distributed.initialize` with `args`' timeouts.

  Raises:
    JoinError: the coordinator's port is taken, the coordinator cannot be
      reached within the init timeout, or jax could not initialise.
  """
  import jax  # pylint: disable=g-import-not-at-top
  limits = timeouts(args)
  if args.coordinator:
    host, port = split_address(args.coordinator)
    if args.process_id == 0:
      if port_in_use(port):
        raise JoinError(f"coordinator port {port} is already in use: choose "
                        "another --coordinator HOST:PORT")
    elif not wait_reachable(host, port, limits["init"]):
      raise JoinError(
          f"coordinator {args.coordinator} unreachable: nothing accepted a "
          f"connection within {limits['init']} s (--init-timeout)")
  if os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION") is None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  try:
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes, process_id=args.process_id,
        initialization_timeout=limits["init"],
        heartbeat_timeout_seconds=limits["heartbeat"],
        shutdown_timeout_seconds=limits["shutdown"])
  except Exception as err:  # pylint: disable=broad-except
    if "Failed to start RPC server" in str(err):
      raise JoinError(f"coordinator port {args.coordinator} is already in "
                      "use: choose another --coordinator HOST:PORT") from None
    raise JoinError(f"jax.distributed.initialize failed: "
                    f"{_first_line(err)}") from None


# region: many-hosts-main-process
def is_main_process() -> bool:
  """Whether this process prints, writes reports and logs: process 0 only.

  Every process computes the same verdicts and digests; one reports them.
  """
  import jax  # pylint: disable=g-import-not-at-top
  return jax.process_index() == 0


def barrier(name: str, timeout_s: int = BARRIER_TIMEOUT_S) -> None:
  """Waits until every process reaches `name` (nothing in one process).

  Orbax's barrier of the coordination service, not
  `multihost_utils.sync_global_devices`, which is a collective: the first
  collective over a new set of devices builds a gloo context, and that
  fails when the processes arrive more than 30 s apart.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from orbax.checkpoint import multihost  # pylint: disable=g-import-not-at-top
  if jax.process_count() == 1:
    return
  # Orbax's public barrier of the coordination service (jax has none that
  # is not a collective). Each name is waited on once: a count makes it so.
  _BARRIERS[name] = _BARRIERS.get(name, 0) + 1
  multihost.get_barrier_sync_fn()(key=f"shardport/{name}/{_BARRIERS[name]}",
                                  timeout_ms=timeout_s * 1000)
# endregion


_BARRIERS = {}


def all_reach(name: str, timeout_s: int) -> bool:
  """Whether every process reaches `name` within `timeout_s` (always, in
  one process): where a process may be held elsewhere (inside a collective
  its peers never join), a barrier that may time out, not one that waits.
  """
  try:
    barrier(name, timeout_s)
  except Exception:  # pylint: disable=broad-except
    return False  # the coordination service's DEADLINE_EXCEEDED
  return True


def collectives() -> str:
  """What carries the collectives between this run's CPU devices.

  `gloo` (TCP, even between devices of one process) once jax.distributed is
  initialised, XLA's in-process collectives otherwise. They sum in different
  orders: an all-reduce over 8 devices is a sequential sum in one plain
  process and gloo's ring order in any jax.distributed job, so digests are
  bitwise comparable only between runs with the same collectives.
  """
  import jax  # pylint: disable=g-import-not-at-top
  if jax.devices()[0].platform != "cpu":
    return jax.devices()[0].platform
  if not jax.distributed.is_initialized():
    return "in-process"
  return str(jax.config.jax_cpu_collectives_implementation)

