"""The training program of the sharded port: train, checkpoint, resume.

  python -m sharded.train --strategy data_parallel --workdir W --steps 200

Its checkpoints are the ones `python -m legacy_pmap.train` writes and reads
(one layout: `shardport.training.checkpoints`), so a job moves between the backends by
running the other program on the same workdir. The loop is
`shardport.training.loop`, shared by both; this file only names the backend.
"""

import sys

from shardport.launch import emulation

BACKEND = "sharded"


def train_and_evaluate(config, workdir, **options):
  """Trains `config` in `workdir` with this backend (`shardport.training.loop`)."""
  from shardport.training import loop  # pylint: disable=g-import-not-at-top
  return loop.train_and_evaluate(BACKEND, config, workdir, **options)


def main(argv=None) -> int:
  """The command line; sets the emulated CPU devices before jax starts."""
  argv = sys.argv[1:] if argv is None else argv
  emulation.set_cpu_device_count(emulation.devices_from_argv(argv))
  from shardport.training import cli  # pylint: disable=g-import-not-at-top
  return cli.main(BACKEND, argv)


if __name__ == "__main__":
  sys.exit(main())
