"""flax's examples/lm1b (its last pmap version), as written, on tfds mock
data: every scalar.

    python bench/real_programs/lm1b_mock.py /tmp/lm1b     # the example
    python bench/real_programs/lm1b_mock.py /tmp/lm1b_g   # its rewrite

The last pmap version is flax 654ae1a4 (`558be01e^`): 558be01e ("updated
lm1b example with jit") moved its train, eval and predict steps to jit;
after it only `per_host_sum_pmap`, which nothing calls, kept a pmap, until
aa897790 removed that too. Runs `train.train_and_evaluate` as the example's
own `train_test.py` does (`tfds.testing.mock_data`, a one-layer model, its
SentencePiece tokenizer trained on the mock's text by its own
tokenizer.py), 4 steps with an evaluation and a text generation at steps 0,
2 and 3 and a checkpoint at 0 and 3, on 8 emulated CPU devices, and
prints a digest of each leaf of the last checkpoint and every scalar it
wrote to tensorboard but clu's timings (`steps_per_sec`, `uptime`). Run
it with a Python that has tensorflow-cpu, tensorflow-text, sentencepiece,
tensorflow-datasets, clu and ml_collections beside jax (`pip install`
each; CI does not, tensorflow is large). No LM1B here: the split sizes the
example reads are written to a metadata folder for the mock, 64 examples
per split. One change outside the example's code: jax 0.10 removed
`jnp.clip`'s `a_max=`, which the example's loop passes (flax's fb5515c1
later wrote `max=`); `a_max` is passed on as `max`.
"""

import contextlib
import io
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
# Timings clu's ReportProgress writes: they differ run to run.
TIMINGS = ("steps_per_sec ", "uptime ")


def config_for_test():
  """train_test.py's config (vocab 32, one layer, 2 heads, 32 tokens) with
  widths of 32 (MLP 64) for the CPU, 4 steps, evaluated every 2; a
  checkpoint at the first step and the last (the loop's own rule)."""
  from configs import default  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  config = default.get_config()
  config.max_corpus_chars, config.vocab_size = 1000, 32
  config.per_device_batch_size = config.eval_per_device_batch_size = 2
  config.num_train_steps, config.eval_every_steps = 4, 2
  config.num_eval_steps = config.num_predict_steps = 1
  config.num_layers, config.num_heads = 1, 2
  config.qkv_dim = config.emb_dim = 32
  config.mlp_dim = 64
  config.max_target_length = config.max_eval_target_length = 32
  config.max_predict_length = 32
  return config


def _clip_a_max() -> None:
  """`jnp.clip(x, a_max=m)` as older jax took it: `max=m` (jax 0.10.2
  raises TypeError on `a_max`)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  clip = jnp.clip
  def clip_with_a_max(x, *args, a_max=None, **kwargs):
    if a_max is not None:
      kwargs["max"] = a_max
    return clip(x, *args, **kwargs)
  jnp.clip = clip_with_a_max


def main(folder: str) -> None:
  tfds_mock.enter(folder)
  _clip_a_max()
  import train  # pylint: disable=g-import-not-at-top
  config = config_for_test()
  data_dir, workdir = tempfile.mkdtemp(), tempfile.mkdtemp()
  tfds_mock.write_split_sizes(data_dir, "lm1b", ("train", "test"), EXAMPLES)
  with tfds.testing.mock_data(num_examples=EXAMPLES, data_dir=data_dir):
    train.train_and_evaluate(config, workdir)
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):
    tfds_mock.print_outputs(workdir)
  for line in printed.getvalue().splitlines():
    if not line.startswith(TIMINGS):
      print(line)


if __name__ == "__main__":
  main(sys.argv[1])
