"""Frozen run configurations, one per strategy."""

import dataclasses


class ConfigError(ValueError):
  """A configuration value that no program accepts."""


class DeviceError(ConfigError):
  """More devices asked for than exist."""


class EnsembleSizeError(ConfigError):
  """An ensemble size that a backend cannot lay out on its devices."""


# How the sharded port may run several members on one device
# (`EnsembleConfig.member_loop`).
MEMBER_LOOPS = ("sequential", "vmap")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """What every strategy needs to train one program.

  Attributes:
    workload: name of a workload in `shardport.workloads.registry`.
    dataset: name of a dataset in `shardport.workloads.datasets`.
    global_batch: examples per optimiser step, over all devices.
    steps: optimiser steps to run.
    learning_rate: optimiser step size.
    momentum: SGD momentum (0 for plain SGD).
    seed: seeds the initial parameters and the batch order.
    input_shape: one example's input shape (filled in from the dataset).
  """

  workload: str = "cnn"
  dataset: str = "digits"
  global_batch: int = 256
  steps: int = 20
  learning_rate: float = 0.002
  momentum: float = 0.9
  seed: int = 0
  input_shape: tuple[int, ...] = (8, 8, 1)


@dataclasses.dataclass(frozen=True)
class AccumulationConfig(TrainConfig):
  """A data-parallel program that accumulates gradients over microbatches.

  Attributes:
    accum_steps: microbatches per device per optimiser step (K); each
      device's part of the global batch is split into K equal microbatches.
    accum_loop: how the K microbatches are looped over, one of
      `shardport.workloads.microbatches.LOOPS`, or `auto` for the measured best on the
      platform (docs/accumulation-notes.md).
  """

  accum_steps: int = 4
  accum_loop: str = "auto"


@dataclasses.dataclass(frozen=True)
class EnsembleConfig(TrainConfig):
  """An ensemble of CNNs, as the classic "ensembling on multiple devices" HOWTO.

  Every member trains on the whole global batch (the batch is replicated, not
  split), so `global_batch` is the HOWTO's `batch_size`. The defaults are the
  HOWTO's optimiser (SGD, learning rate 0.1, momentum 0.9, mean loss) with a
  smaller batch and fewer epochs, so that the default run on the digits data
  finishes in seconds on two CPU cores.

  Attributes:
    members: ensemble size; the pmap backend needs exactly one per device,
      the sharded port any multiple of the device count.
    epochs: passes over the training set; the CLI turns them into `steps`
      (`epochs * (n_train // global_batch)`) and evaluates after each.
    member_loop: how the sharded port runs several members on one device:
      `sequential` (bitwise equal to the reference, and faster on XLA:CPU)
      or `vmap` (batched; ~1 ulp per step apart, which SGD amplifies; see
      docs/ensemble-notes.md).
  """

  members: int = 8
  epochs: int = 5
  member_loop: str = "sequential"
  global_batch: int = 128
  learning_rate: float = 0.1
  momentum: float = 0.9


@dataclasses.dataclass(frozen=True)
class EnsembleDataConfig(TrainConfig):
  """An ensemble whose members each train data-parallel (issue 22).

  The devices form a `members` x `data` mesh: member m trains on row m, its
  global batch split over the row's D = devices / M devices. Every member
  trains on the same global batch, as in `EnsembleConfig` (so the one-device
  reference is the ensemble's); the optimiser is the HOWTO's, as there.

  Attributes:
    members: ensemble size M; it must divide the device count.
    epochs: passes over the training set; the CLI turns them into `steps`
      (`epochs * (n_train // global_batch)`) and evaluates after each.
  """

  members: int = 2
  epochs: int = 5
  global_batch: int = 128
  learning_rate: float = 0.1
  momentum: float = 0.9
