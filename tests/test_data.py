"""Datasets and the batch order that every backend shares."""

import time

import numpy as np
import pytest
from sklearn.datasets import load_digits
import tensorflow_datasets as tfds

from shardport.workloads import batches
from shardport.workloads import datasets


def _examples(images, labels):
  """(label, pixels) pairs, sorted: a dataset's contents in any order."""
  pixels = np.asarray(images).reshape(len(labels), -1)
  return sorted(zip(np.asarray(labels).tolist(), pixels.tolist()))


def test_digits_is_real_scaled_and_split(digits):
  assert digits.train_inputs.shape[1:] == (8, 8, 1)
  assert digits.train_inputs.min() >= 0 and digits.train_inputs.max() <= 1
  assert len(digits.train_inputs) + len(digits.test_inputs) == 1797
  # The split holds scikit-learn's images (0..16 scaled to 0..1) with their
  # labels, each once.
  raw = load_digits()
  ours = _examples(
      np.rint(16 * np.concatenate([digits.train_inputs, digits.test_inputs])),
      np.concatenate([digits.train_targets, digits.test_targets]))
  assert ours == _examples(raw.images, raw.target)
  again = datasets.load("digits")
  np.testing.assert_array_equal(digits.test_targets, again.test_targets)


def test_synthetic_any_size():
  data = datasets.load("synthetic:13x9:100")
  assert data.train_inputs.shape == (100, 13, 9, 1)
  assert 0 <= data.train_inputs.min() and data.train_inputs.max() < 1
  assert set(np.unique(data.train_targets)) <= set(range(10))
  with pytest.raises(datasets.DatasetError):
    datasets.load("synthetic:2x2:10")


def test_unknown_dataset_names_the_choices():
  with pytest.raises(datasets.DatasetError, match="digits"):
    datasets.load("cifar")


def test_tfds_mnist_through_mock_data(tmp_path):
  with tfds.testing.mock_data(num_examples=24):
    data = datasets.load("mnist", data_dir=str(tmp_path))
  assert data.train_inputs.shape == (24, 28, 28, 1)
  assert data.train_inputs.dtype == np.float32
  assert data.train_inputs.max() <= 1.0
  assert data.train_targets.dtype == np.int32


def test_unprepared_tfds_fails_fast_and_says_how(tmp_path):
  start = time.perf_counter()
  with pytest.raises(datasets.DatasetError, match="tfds build fashion_mnist"):
    datasets.load("fashion_mnist", data_dir=str(tmp_path))
  assert time.perf_counter() - start < 30  # no network retries (~205 s)


def test_batch_order_is_seeded_and_covers_epochs():
  order = batches.batch_order(seed=3, n_examples=100, global_batch=32,
                              steps=7)
  assert order.shape == (7, 32)
  np.testing.assert_array_equal(order, batches.batch_order(3, 100, 32, 7))
  assert not np.array_equal(order, batches.batch_order(4, 100, 32, 7))
  # Three full batches per epoch, no example twice within an epoch.
  assert len(set(order[:3].ravel())) == 96


def test_process_slices_tile_the_global_batch(digits):
  whole = next(batches.train_batches(digits, 0, 64, 1))
  parts = [next(batches.train_batches(digits, 0, 64, 1, process_index=i,
                                      process_count=4)) for i in range(4)]
  np.testing.assert_array_equal(
      np.concatenate([p["inputs"] for p in parts]), whole["inputs"])
  with pytest.raises(batches.BatchError):
    batches.process_slice(64, 0, 3)


def test_batch_larger_than_data_is_an_error():
  with pytest.raises(batches.BatchError, match="exceeds"):
    batches.batch_order(0, 10, 32, 1)
