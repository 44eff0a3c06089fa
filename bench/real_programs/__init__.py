"""Public pmap programs rewritten and run beside their originals.

`run` (`python -m bench.real_programs.run`) rewrites each and runs the
original and the port on 8 emulated CPU devices; `pmap_tutorial` is JAX's
pmap tutorial as a script.

- flax's examples as written, on mock data: `imagenet_mock`, `lm1b_mock`,
  `wmt_mock` over `tfds_mock` (what they share); `conll` writes the
  synthetic CoNLL-U files flax's nlp_seq reads.
- Their train steps as `compare.Port`s for `--prove`: `nlp_seq_port`,
  `imagenet_port`, `lm1b_port`.
- Stand-ins with the pmap constructs of flax's examples/wmt and
  examples/imagenet: `wmt_constructs`, `imagenet_constructs`; what a
  person does to wmt where `--global` names a place: `wmt_person`.
- A program fed by a real tf.data pipeline that batches per device,
  through `--global`, run in 1 x 8 and 2 x 4 beside its original:
  `tfdata_global` (tests/rewrite_inputs/tfdata_device_batched.py).
- brax's PPO as its own `train_test.py` runs it: `brax_ppo`.
- equinox's BERT example (`eqx.filter_pmap`), its notebook's code as
  written: `equinox_bert`.
"""
