"""The emulated CPU device count, set before jax starts its backend.

Imports nothing from jax: it must run before jax is imported.
"""

import os
import sys

COUNT_FLAG = "--xla_force_host_platform_device_count"
DEFAULT_DEVICES = 8


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
