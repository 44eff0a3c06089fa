"""Every input of a run, checked before anything compiles: one `prepare`.

`python -m compare` and both training programs read the same options into
the same program, config, data and device count, and refuse the same bad
input with the same one line (exit 2).
"""

import dataclasses
from typing import Any

from shardport import strategies
from shardport.launch import options


@dataclasses.dataclass(frozen=True)
class Inputs:
  """A run's checked inputs.

  Attributes:
    program: the program (a `compare` strategy is one too).
    config: its config, validated.
    data: the dataset.
    n_devices: devices per process.
  """

  program: strategies.Program
  config: Any
  data: Any
  n_devices: int


def prepare(program: strategies.Program, args,
            device_counts: tuple[int, ...] = ()) -> Inputs:
  """Reads and checks the run options of `args` for `program`.

  Args:
    program: the program (or strategy) `--strategy` named.
    args: the parsed options (`shardport.launch.options.add_run_options`).
    device_counts: further device counts the config must fit (a sweep).

  Raises:
    options.UsageError: (one line) too many devices, an unknown workload
      or dataset, or a config the program cannot take on these devices.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from shardport.workloads import datasets  # pylint: disable=g-import-not-at-top
  from shardport.workloads import registry  # pylint: disable=g-import-not-at-top

  available = jax.local_device_count()
  n_devices = args.devices or available
  counts = device_counts or (n_devices,)
  if max(n_devices, *counts) > available:
    raise options.UsageError(f"asked for {max(n_devices, *counts)} devices, "
                             f"{available} exist")
  given = options.run_options(args)
  try:
    workload = registry.get(given.get("workload", program.workloads[0]))
    data = datasets.load(given.get("dataset", workload.dataset),
                         args.data_dir)
    config = program.make_config(given, data)
    for count in counts:
      program.validate(config, data, count, jax.process_count())
  except ValueError as err:  # every input error of workloads and programs
    raise options.UsageError(str(err)) from None
  return Inputs(program, config, data, n_devices)
