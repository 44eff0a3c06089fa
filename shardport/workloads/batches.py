"""The batch order: one seed, the same global batches for every backend."""

from collections.abc import Iterator

import numpy as np

from shardport.workloads import datasets


class BatchError(ValueError):
  """A batch size that the data or the devices cannot take."""


def batch_order(seed: int, n_examples: int, global_batch: int,
                steps: int) -> np.ndarray:
  """Example indices of every step's global batch, `[steps, global_batch]`.

  Each epoch is a fresh permutation drawn from `seed`; the tail of an epoch
  that does not fill a batch is dropped so that every batch has equal size.
  """
  if global_batch > n_examples:
    raise BatchError(
        f"global batch {global_batch} exceeds the {n_examples} training "
        "examples")
  per_epoch = n_examples // global_batch
  rng = np.random.default_rng(seed)
  epochs = -(-steps // per_epoch)
  order = [rng.permutation(n_examples)[:per_epoch * global_batch]
           for _ in range(epochs)]
  return np.concatenate(order).reshape(-1, global_batch)[:steps]


def process_slice(global_batch: int, process_index: int,
                  process_count: int) -> slice:
  """The contiguous part of each global batch that one process reads."""
  if global_batch % process_count:
    raise BatchError(f"global batch {global_batch} does not divide over "
                     f"{process_count} processes")
  local = global_batch // process_count
  return slice(process_index * local, (process_index + 1) * local)


def train_batches(data: datasets.Dataset, seed: int, global_batch: int,
                  steps: int, process_index: int = 0,
                  process_count: int = 1) -> Iterator[dict[str, np.ndarray]]:
  """Yields this process's slice of every step's global training batch."""
  part = process_slice(global_batch, process_index, process_count)
  for indices in batch_order(seed, len(data.train_inputs), global_batch,
                             steps):
    local = indices[part]
    yield {"inputs": data.train_inputs[local],
           "targets": data.train_targets[local]}


def test_batch(data: datasets.Dataset, multiple_of: int) -> dict[str, np.ndarray]:
  """The test split, truncated to a multiple of `multiple_of` examples."""
  n = len(data.test_inputs) // multiple_of * multiple_of
  return {"inputs": data.test_inputs[:n], "targets": data.test_targets[:n]}


class MicrobatchError(BatchError):
  """A global batch that does not split into devices x microbatches."""


def microbatch_size(global_batch: int, n_devices: int,
                    accum_steps: int) -> int:
  """Examples in one microbatch on one device.

  Raises:
    MicrobatchError: when `global_batch` is not a positive multiple of
      `n_devices * accum_steps`; the one-line message names all three.
  """
  if accum_steps < 1:
    raise MicrobatchError(f"accum steps must be at least 1, got {accum_steps}")
  parts = n_devices * accum_steps
  if global_batch < parts or global_batch % parts:
    raise MicrobatchError(
        f"global batch {global_batch} does not split into {n_devices} "
        f"devices x {accum_steps} microbatches (needs a multiple of {parts})")
  return global_batch // parts
