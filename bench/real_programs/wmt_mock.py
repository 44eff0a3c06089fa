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

import os
import pathlib
import sys
import tempfile

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top,wrong-import-position

from bench.real_programs import tfds_mock  # pylint: disable=g-import-not-at-top,wrong-import-position

EXAMPLES = 64
# The datasets and splits the example reads (configs/default.py).
SPLITS = {"wmt17_translate/de-en": ("train", "validation", "test"),
          "wmt14_translate/de-en": ("train", "validation", "test")}


def main(folder: str) -> None:
  tfds_mock.enter(folder)
  import train  # pylint: disable=g-import-not-at-top
  from configs import default  # pylint: disable=g-import-not-at-top

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
  for dataset, splits in SPLITS.items():
    tfds_mock.write_split_sizes(data_dir, dataset, splits, EXAMPLES)
  with tfds.testing.mock_data(num_examples=EXAMPLES, data_dir=data_dir):
    train.train_and_evaluate(config, workdir)
  tfds_mock.print_outputs(workdir)


if __name__ == "__main__":
  main(sys.argv[1])
