"""Entry point of `python -m compare`."""

import sys

from shardport.launch import emulation

# Before anything imports jax: building the parser imports the registry.
emulation.set_cpu_device_count(emulation.devices_from_argv(sys.argv[1:]))

from compare._src import cli  # pylint: disable=g-import-not-at-top,wrong-import-position

if __name__ == "__main__":
  sys.exit(cli.main())
