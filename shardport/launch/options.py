"""The options every shardport program shares, and what they mean.

`python -m compare` and both training programs (`python -m legacy_pmap.train`,
`python -m sharded.train`) take the same flags where they mean the same
thing; they are declared once here.
"""

import argparse


class UsageError(Exception):
  """Bad usage or input: reported in one line with exit code 2."""


class Parser(argparse.ArgumentParser):
  """An ArgumentParser that raises `UsageError` instead of exiting."""

  def error(self, message):
    raise UsageError(message)


# Integer options that must be at least 1 when given.
POSITIVE = ("devices", "processes", "steps", "global_batch", "members",
            "epochs", "accum_steps", "num_processes", "init_timeout",
            "heartbeat_timeout", "shutdown_timeout")


# `--strategy` where none is given.
DEFAULT_STRATEGY = "ensemble"


def add_run_options(parser: argparse.ArgumentParser,
                    strategies: tuple[str, ...],
                    default_strategy: str | None = DEFAULT_STRATEGY) -> None:
  """Adds the options that define a training run (strategy, data, config).

  With `default_strategy` None, an unset `--strategy` stays None (the
  caller tells it apart from one given, and chooses the default itself).
  """
  add = parser.add_argument
  add("--strategy", choices=strategies, default=default_strategy,
      help="the program (default ensemble)")
  add("--workload", default=None,
      help="cnn (default), linreg (data_parallel), linear512 (accumulation)")
  add("--dataset", default=None,
      help="digits (default, offline), mnist, fashion_mnist, "
           "synthetic[:HxW][:N]")
  add("--data-dir", default=None, help="tensorflow-datasets data directory")
  add("--devices", type=int, default=None,
      help="devices per process; on CPU the emulated count (default 8)")
  add("--steps", type=int, default=None, help="optimiser steps")
  add("--batch-size", dest="global_batch", type=int, default=None,
      help="global batch, over all devices")
  add("--learning-rate", type=float, default=None)
  add("--momentum", type=float, default=None)
  add("--seed", type=int, default=None)
  add("--members", type=int, default=None, help="ensemble members")
  add("--epochs", type=int, default=None, help="ensemble epochs")
  add("--member-loop", default=None,
      help="ensemble: sequential (default) or vmap, for several members "
           "per device")
  add("--accum-steps", type=int, default=None, help="microbatches per step")
  add("--accum-loop", default=None, help="microbatch loop (accumulation)")


def add_process_options(parser: argparse.ArgumentParser) -> None:
  """Adds the options of a multi-process run (`shardport.launch.distributed`).

  `--processes P` launches P local worker processes, joined on localhost
  (`shardport.launch.launcher`); `--coordinator`, `--num-processes` and
  `--process-id`, or `--distributed` alone, make this process one worker
  of a job launched elsewhere (a cluster scheduler, or the launcher).
  """
  add = parser.add_argument
  add("--processes", type=int, default=None,
      help="launch this many local worker processes, each with --devices "
           "emulated CPU devices, joined by jax.distributed on localhost")
  add("--baseline", action="store_true",
      help="with --processes: also run one process with all the devices and "
           "report examples/s and state digests against it")
  add("--coordinator", default=None, metavar="HOST:PORT",
      help="the jax.distributed coordinator (process 0's address); with "
           "--processes, the local address to use (default: a free port)")
  add("--num-processes", type=int, default=None,
      help="processes in a job launched elsewhere (this is one of them)")
  add("--process-id", type=int, default=None,
      help="this process's index in a job launched elsewhere")
  add("--distributed", action="store_true",
      help="this process is a worker of a job launched elsewhere: without "
           "--coordinator, jax.distributed.initialize() detects the cluster "
           "(SLURM, Cloud TPU, Kubernetes, ...)")
  add("--init-timeout", type=int, default=None, metavar="S",
      help="seconds to wait for every process to join (default 30 on "
           "localhost, jax's 300 elsewhere)")
  add("--heartbeat-timeout", type=int, default=None, metavar="S",
      help="seconds without a heartbeat before a process is declared lost "
           "and every other one aborts (default 10 on localhost, jax's 100 "
           "elsewhere)")
  add("--shutdown-timeout", type=int, default=None, metavar="S",
      help="seconds to wait at exit for every process to finish (default 30 "
           "on localhost, jax's 300 elsewhere)")


def check_positive(args: argparse.Namespace) -> None:
  """Raises UsageError for an integer option below 1."""
  for name in POSITIVE:
    value = getattr(args, name, None)
    if value is not None and value < 1:
      raise UsageError(f"--{name.replace('_', '-')} must be at least 1, "
                       f"got {value}")


def run_options(args: argparse.Namespace) -> dict:
  """The given run options as a dict (None for those not given dropped)."""
  return {k: v for k, v in vars(args).items() if v is not None}
