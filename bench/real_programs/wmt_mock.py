"""flax's examples/wmt, as written, on tfds mock data: every scalar.

    python bench/real_programs/wmt_mock.py FLAX/examples/wmt
    python bench/real_programs/wmt_mock.py /tmp/wmt_global   # a rewrite

Runs `train.train_and_evaluate` as the example's own `train_test.py` does
(`tfds.testing.mock_data`, its one-layer model, one sentence pair per
device), 4 steps with an evaluation and a translation (BLEU) at steps 0, 2
and 3 and a checkpoint at the last, on 8 emulated CPU devices, and prints
a digest of each leaf of that checkpoint and every scalar it wrote to
tensorboard but `steps_per_second`. Run it with a
Python that has tensorflow-cpu, tensorflow-text, sentencepiece,
tensorflow-datasets, clu and ml_collections beside jax (`pip install`
each; CI does not, tensorflow is large). No WMT here: the split sizes the
example reads are written to a metadata folder for the mock, 64 examples
per split; the SentencePiece model is trained on the mock's text, as the
example trains it on WMT's.
"""

import glob
import hashlib
import os
import sys
import tempfile

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top,wrong-import-position

EXAMPLES = 64
# The datasets and splits the example reads (configs/default.py).
SPLITS = {"wmt17_translate/de-en": ("train", "validation", "test"),
          "wmt14_translate/de-en": ("train", "validation", "test")}


def write_split_sizes(data_dir: str) -> None:
  """Each dataset's metadata with `EXAMPLES` per split, for the mock."""
  for dataset, splits in SPLITS.items():
    builder = tfds.builder(dataset, data_dir=data_dir)
    name = dataset.split("/")[0]
    builder.info.set_splits(tfds.core.SplitDict([
        tfds.core.SplitInfo(
            name=split, shard_lengths=[EXAMPLES], num_bytes=0,
            filename_template=tfds.core.ShardedFileTemplate(
                data_dir=builder.data_dir, dataset_name=name, split=split,
                filetype_suffix="tfrecord",
                template="{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"))
        for split in splits]))
    os.makedirs(builder.data_dir, exist_ok=True)
    builder.info.write_to_directory(builder.data_dir)


def main(folder: str) -> None:
  tf.config.set_visible_devices([], "GPU")
  tf.random.set_seed(0)
  np.random.seed(0)
  sys.path.insert(0, os.path.abspath(folder))
  os.chdir(folder)
  import train  # pylint: disable=g-import-not-at-top
  from configs import default  # pylint: disable=g-import-not-at-top
  from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=g-import-not-at-top

  # train_test.py's config, 4 steps, evaluated every 2.
  config = default.get_config()
  config.max_corpus_chars, config.vocab_size = 1000, 32
  config.per_device_batch_size = 1
  config.num_train_steps, config.eval_every_steps = 4, 2
  config.num_eval_steps = config.num_predict_steps = 1
  config.num_layers, config.num_heads = 1, 2
  config.qkv_dim = config.emb_dim = 128
  config.mlp_dim = 512
  config.max_target_length = config.max_eval_target_length = 32
  config.max_predict_length = 32
  data_dir, workdir = tempfile.mkdtemp(), tempfile.mkdtemp()
  write_split_sizes(data_dir)
  with tfds.testing.mock_data(num_examples=EXAMPLES, data_dir=data_dir):
    train.train_and_evaluate(config, workdir)
  # The checkpoint of the last step, leaf by leaf: a digest of its bytes.
  from flax.training import checkpoints  # pylint: disable=g-import-not-at-top
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


if __name__ == "__main__":
  main(sys.argv[1])
