"""Digits (sklearn, offline) as host numpy batches, the same for every run."""

import functools

import numpy as np

N_TEST = 297  # The last 297 of 1797 examples; the first 1500 train.


@functools.cache
def _digits():
  """All digits: images [N, 8, 8, 1] float32 in [0, 1], labels [N] int32."""
  # Imported here so that importing the package does not import sklearn.
  # pylint: disable-next=g-import-not-at-top
  from sklearn.datasets import load_digits
  digits = load_digits()
  images = (digits.images / 16.0).astype(np.float32)[..., None]
  return images, digits.target.astype(np.int32)


def train_set() -> dict[str, np.ndarray]:
  """The training split, `{"image": [1500, 8, 8, 1], "label": [1500]}`."""
  images, labels = _digits()
  return {"image": images[:-N_TEST], "label": labels[:-N_TEST]}


def test_set() -> dict[str, np.ndarray]:
  """The test split, `{"image": [297, 8, 8, 1], "label": [297]}`."""
  images, labels = _digits()
  return {"image": images[-N_TEST:], "label": labels[-N_TEST:]}


@functools.lru_cache(maxsize=2)
def _epoch_order(epoch: int, seed: int, n: int) -> np.ndarray:
  """The training examples' order in one epoch."""
  return np.random.default_rng([seed, epoch]).permutation(n)


def host_batch(step: int, batch_size: int = 64,
               seed: int = 0) -> dict[str, np.ndarray]:
  """The global batch of optimizer step `step`, on the host.

  Each epoch is a fresh permutation of the training split; the last partial
  batch of an epoch is dropped so that every batch has `batch_size` rows.
  A function of `step` alone, so a resumed run or another program sees the
  same examples in the same order.

  Args:
    step: The optimizer step, 0-based.
    batch_size: The global batch size; the programs split it over devices.
    seed: Seeds the order.

  Returns:
    `{"image": [batch_size, 8, 8, 1] float32, "label": [batch_size] int32}`.
  """
  train = train_set()
  n = len(train["label"])
  per_epoch = n // batch_size
  epoch, index = divmod(step, per_epoch)
  order = _epoch_order(epoch, seed, n)
  rows = order[index * batch_size:(index + 1) * batch_size]
  return {name: array[rows] for name, array in train.items()}
