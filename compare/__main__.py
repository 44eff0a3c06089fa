"""Entry point of `python -m compare`."""

import sys

from shardport.launch import emulation

# Before anything imports jax: building the parser imports the registry.
emulation.set_cpu_device_count(emulation.devices_from_argv(sys.argv[1:]))

if "-h" not in sys.argv and "--help" not in sys.argv and (
    "--quiet" not in sys.argv):
  # The first progress line, before the imports (jax, the strategies).
  from compare._src.prove import progress  # pylint: disable=g-import-not-at-top,wrong-import-position
  progress.phase("starting: importing jax and the programs")

from compare._src import cli  # pylint: disable=g-import-not-at-top,wrong-import-position

if __name__ == "__main__":
  sys.exit(cli.main())
