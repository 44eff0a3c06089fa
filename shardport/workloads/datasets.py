"""Datasets as host numpy arrays: digits (offline), tfds MNIST, synthetic, linreg,
linear512.

Every dataset is a `Dataset` of numpy arrays held whole in host memory; the
batch order is drawn separately (`shardport.workloads.batches`) so that every backend
sees the same examples in the same order.
"""

import re
from typing import NamedTuple

import numpy as np

TFDS_NAMES = ("mnist", "fashion_mnist")
NAMES = ("digits", *TFDS_NAMES, "synthetic", "linreg", "linear512")

# Split and synthetic draws use their own fixed seed so that the data does not
# change with the run's --seed (which seeds the init and the batch order).
_DATA_SEED = 1234
_SYNTHETIC = re.compile(r"^synthetic(?::(\d+)x(\d+))?(?::(\d+))?$")


class DatasetError(ValueError):
  """A dataset is unknown, malformed or not prepared; the message says why."""


class Dataset(NamedTuple):
  """Train and test splits; inputs are float32, targets int32 or float32."""

  name: str
  train_inputs: np.ndarray
  train_targets: np.ndarray
  test_inputs: np.ndarray
  test_targets: np.ndarray


def load(name: str, data_dir: str | None = None) -> Dataset:
  """Loads a dataset by name.

  Args:
    name: `digits`, `mnist`, `fashion_mnist`, `linreg`, `linear512`, or
      `synthetic[:HxW][:N]` (default 28x28 images, 4096 train examples).
    data_dir: tensorflow-datasets data directory for the tfds datasets.

  Returns:
    The dataset.

  Raises:
    DatasetError: for an unknown name or a tfds dataset that is not prepared.
  """
  if name == "digits":
    return _digits()
  if name in TFDS_NAMES:
    return _tfds(name, data_dir)
  if name == "linreg":
    return _linreg()
  if name == "linear512":
    return _linear512()
  match = _SYNTHETIC.match(name)
  if match:
    height, width, size = match.groups()
    return _synthetic(int(height or 28), int(width or 28), int(size or 4096))
  raise DatasetError(
      f"unknown dataset {name!r}; choose one of {', '.join(NAMES)} "
      "(synthetic takes an optional :HxW and :N, e.g. synthetic:28x28:8192)")


def _split(name, inputs, targets, test_fraction=0.2):
  order = np.random.default_rng(_DATA_SEED).permutation(len(inputs))
  n_test = int(len(inputs) * test_fraction)
  test, train = order[:n_test], order[n_test:]
  return Dataset(name, inputs[train], targets[train], inputs[test],
                 targets[test])


def _digits():
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  images_NHWC = (digits.images / 16.0).astype(np.float32)[..., None]
  return _split("digits", images_NHWC, digits.target.astype(np.int32))


def _tfds_split(name, split, data_dir):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir,
                              download=False)
    records = [source[i] for i in range(len(source))]
  except Exception as err:  # tfds raises several kinds; all mean "not here".
    raise DatasetError(
        f"{name} is not prepared in {data_dir or 'the default TFDS_DATA_DIR'} "
        f"({type(err).__name__}). On a machine with internet run `tfds build "
        f"{name} --file_format=array_record --data_dir=D`, copy D here and "
        "pass --data-dir D (or set TFDS_DATA_DIR)") from None
  images = np.stack([r["image"] for r in records]).astype(np.float32) / 255.0
  labels = np.array([r["label"] for r in records], dtype=np.int32)
  return images, labels


def _tfds(name, data_dir):
  train_inputs, train_targets = _tfds_split(name, "train", data_dir)
  test_inputs, test_targets = _tfds_split(name, "test", data_dir)
  return Dataset(name, train_inputs, train_targets, test_inputs, test_targets)


def _synthetic(height, width, size):
  if min(height, width) < 4 or size < 1:
    raise DatasetError(
        f"synthetic images need at least 4x4 pixels and one example, got "
        f"{height}x{width}:{size}")
  rng = np.random.default_rng(_DATA_SEED)
  n_test = max(size // 4, 1)
  images = rng.random((size + n_test, height, width, 1), dtype=np.float32)
  labels = rng.integers(0, 10, size + n_test, dtype=np.int32)
  return Dataset(f"synthetic:{height}x{width}:{size}", images[:size],
                 labels[:size], images[size:], labels[size:])


def _linreg(size=8192, true_w=2.0, true_b=-1.0, noise=0.5):
  """The pmap tutorial's data: y = w*x + b + noise, x ~ N(0, 1)."""
  rng = np.random.default_rng(_DATA_SEED)
  xs = rng.normal(size=(size, 1)).astype(np.float32)
  ys = (xs * true_w + true_b
        + noise * rng.normal(size=(size, 1))).astype(np.float32)
  return _split("linreg", xs, ys)


def _linear512(size=4096, features=512):
  """The gradient-accumulation classic: random vectors, random booleans.

  Targets are 0.0/1.0 of shape `[N, 1]`; there is nothing to learn beyond
  memorising the training set, so test accuracy is chance by construction.
  """
  rng = np.random.default_rng(_DATA_SEED)
  xs = rng.normal(size=(size, features)).astype(np.float32)
  ys = rng.integers(0, 2, size=(size, 1)).astype(np.float32)
  return _split("linear512", xs, ys)
