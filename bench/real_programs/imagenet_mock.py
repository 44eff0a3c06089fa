"""flax's examples/imagenet, as written, on tfds mock data: every scalar.

    python -m compare.rewrite FLAX/examples/imagenet/train.py \
        -o /tmp/glob/train.py --global      # beside a copy of the example
    python bench/real_programs/imagenet_mock.py FLAX/examples/imagenet
    python bench/real_programs/imagenet_mock.py /tmp/glob

Runs `train.train_and_evaluate` as the example's own `train_test.py` does
(`tfds.testing.mock_data`), `_ResNet1`, global batch 16, 4 steps, on 8
emulated CPU devices, and prints a digest of each leaf of the checkpoint
it saves at the last step and every scalar it wrote to tensorboard but
`steps_per_second`. Run it with a Python that has tensorflow-cpu,
tensorboard, tensorflow-datasets, clu and ml_collections beside jax (`pip
install` each; CI does not, tensorflow is large). No ImageNet here: the
split sizes the example reads are written to a metadata folder for the
mock, 64 examples per split.

Deterministic by two changes outside the example's code, the same for any
program run so: tf's and numpy's seeds, and its random crop and flip (tf's
stateful random ops in a parallel map, which no seed makes reproducible run
to run) replaced by its center crop and no flip.
"""

import os
import pathlib
import sys
import tempfile

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top,wrong-import-position

from bench.real_programs import tfds_mock  # pylint: disable=g-import-not-at-top,wrong-import-position

EXAMPLES = 64


def main(folder: str) -> None:
  tfds_mock.enter(folder)
  import input_pipeline  # pylint: disable=g-import-not-at-top
  import train  # pylint: disable=g-import-not-at-top
  from configs import default  # pylint: disable=g-import-not-at-top
  input_pipeline._decode_and_random_crop = (  # pylint: disable=protected-access
      input_pipeline._decode_and_center_crop)  # pylint: disable=protected-access
  tf.image.random_flip_left_right = lambda image, seed=None: image

  config = default.get_config()
  config.model, config.batch_size = "_ResNet1", 16
  config.num_epochs, config.num_train_steps = 1, 4
  config.steps_per_eval, config.log_every_steps = 2, 2
  config.profile, config.shuffle_buffer_size, config.prefetch = False, 16, 1
  data_dir, workdir = tempfile.mkdtemp(), tempfile.mkdtemp()
  tfds_mock.write_split_sizes(data_dir, "imagenet2012",
                              ("train", "validation"), EXAMPLES)
  with tfds.testing.mock_data(num_examples=EXAMPLES, data_dir=data_dir):
    train.train_and_evaluate(workdir=workdir, config=config)
  tfds_mock.print_outputs(workdir)


if __name__ == "__main__":
  main(sys.argv[1])
