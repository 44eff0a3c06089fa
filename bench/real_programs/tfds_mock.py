"""What `imagenet_mock.py` and `wmt_mock.py` share: a flax example run on
`tfds.testing.mock_data`, and every number it leaves behind.

Needs tensorflow, tensorflow-datasets and tensorboard beside jax; imported
by those scripts only (CI does not install tensorflow).
"""

import glob
import hashlib
import os
import sys

import jax
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds


def enter(folder: str) -> None:
  """tensorflow on the CPU, tf's and numpy's seeds set, and `folder` (the
  example) first on the path and the working directory, as its tests run."""
  tf.config.set_visible_devices([], "GPU")
  tf.random.set_seed(0)
  np.random.seed(0)
  sys.path.insert(0, os.path.abspath(folder))
  os.chdir(folder)


def write_split_sizes(data_dir: str, dataset: str, splits, examples: int):
  """`dataset`'s metadata in `data_dir` with `examples` in each of `splits`,
  which the mock reads instead of the real dataset's sizes."""
  builder = tfds.builder(dataset, data_dir=data_dir)
  name = dataset.split("/")[0]
  builder.info.set_splits(tfds.core.SplitDict([
      tfds.core.SplitInfo(
          name=split, shard_lengths=[examples], num_bytes=0,
          filename_template=tfds.core.ShardedFileTemplate(
              data_dir=builder.data_dir, dataset_name=name, split=split,
              filetype_suffix="tfrecord",
              template="{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"))
      for split in splits]))
  os.makedirs(builder.data_dir, exist_ok=True)
  builder.info.write_to_directory(builder.data_dir)


def print_outputs(workdir: str) -> None:
  """A digest of each leaf of the last checkpoint in `workdir`, then every
  numeric scalar written to tensorboard there but `steps_per_second` (a
  timing): lines two runs' `diff` compares."""
  from flax.training import checkpoints  # pylint: disable=g-import-not-at-top
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top
  saved = checkpoints.restore_checkpoint(workdir, None)
  for path, leaf in jax.tree_util.tree_flatten_with_path(saved)[0]:
    leaf = np.asarray(leaf)
    print("checkpoint", jax.tree_util.keystr(path), leaf.dtype, leaf.shape,
          hashlib.sha256(leaf.tobytes()).hexdigest()[:16])
  for path in sorted(glob.glob(os.path.join(workdir, "**", "events.*"),
                               recursive=True)):
    events = event_accumulator.EventAccumulator(path,
                                                size_guidance={"tensors": 0})
    events.Reload()
    for tag in sorted(events.Tags()["tensors"]):
      if "steps_per_second" in tag:
        continue
      for event in events.Tensors(tag):
        value = tf.make_ndarray(event.tensor_proto)
        if value.dtype.kind in "fiu" and value.size == 1:  # not text
          print(tag, event.step, repr(float(value)))
