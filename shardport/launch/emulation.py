"""The emulated CPU device count, set before jax starts its backend.

Imports nothing from jax: it must run before jax is imported.
"""

import os
import sys

COUNT_FLAG = "--xla_force_host_platform_device_count"
DEFAULT_DEVICES = 8
# Read by XLA's CPU client when it starts: the size of the thread pool every
# emulated device's computations (and their collectives' waits) run on.
THREADS_ENV = "NPROC"


def set_cpu_device_count(devices: int | None,
                         default: int = DEFAULT_DEVICES) -> None:
  """Emulates `devices` (or `default`) CPU devices, unless too late or set.

  Does nothing when jax is already imported (its backend may have started)
  or when the user's `XLA_FLAGS` already sets a count.
  """
  flags = os.environ.get("XLA_FLAGS", "")
  if "jax" not in sys.modules and COUNT_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {COUNT_FLAG}={devices or default}".strip()


def devices_from_argv(argv: list[str]) -> int | None:
  """`--devices N` (or `--devices=N`) from a command line, before parsing.

  The count must be set before the registry imports jax, which happens as
  the parser is built; a malformed value is left for the parser to report.
  """
  for i, arg in enumerate(argv):
    value = (arg.split("=", 1)[1] if arg.startswith("--devices=") else
             argv[i + 1] if arg == "--devices" and i + 1 < len(argv) else None)
    if value is not None:
      return int(value) if value.isdigit() and int(value) > 0 else None
  return None


def cpu_threads(devices: int) -> int:
  """The CPU client's thread pool size that emulated devices never deadlock
  on: two threads per device, or the cores where more.

  XLA's CPU client runs every device's computations on one pool of
  max(`NPROC` or the cores, devices) threads. With that pool, steps with
  collectives queued faster than they run (a loop that reads no result)
  can deadlock: a collective's rendezvous waits for a device that never
  arrives, and after 40 s XLA aborts the process (SIGABRT). With two
  threads per device the JAX pmap tutorial as written ran 20 of 20 times
  on 8 emulated devices of 2 cores, against 2 of 5 with the pool as it
  starts (measured, docs/REWRITE.md#cpu-wait; why 16 threads do not
  deadlock where 8 do is not read from XLA's source). The pool's size also
  sets how Eigen splits a convolution's sums: every run compared bitwise
  must use the same.
  """
  return max(len(os.sched_getaffinity(0)), 2 * devices)


def set_cpu_threads(devices: int | None,
                    default: int = DEFAULT_DEVICES) -> None:
  """Sizes the CPU client's thread pool for `devices` (or `default`)
  emulated devices (`cpu_threads`), unless too late or set.

  Does nothing when jax is already imported or the user set `NPROC`.
  """
  if "jax" not in sys.modules:
    os.environ.setdefault(THREADS_ENV, str(cpu_threads(devices or default)))
