"""flax's examples/lm1b train step (its last pmap version, flax 558be01e^)
as a `compare.Port`, so that `python -m compare.rewrite train.py -o
train_global.py --global --prove lm1b_port:port` proves the rewrite of its
`p_train_step` (run from the example's folder, beside its train.py,
models.py and configs/, as nlp_seq_port.py is for nlp_seq).

The step is the example's own: `train_step` bound to its `config` and
`learning_rate_fn` as its pmap binds them, its one-layer model of
lm1b_mock.py (vocab 32, 32 tokens, bfloat16 as the default config runs),
its optimiser (`optax.adamw` as `train_and_evaluate` builds it), state
stacked as `jax_utils.replicate` gives it. The example passes a dropout key
per device (`dropout_rng=dropout_rngs`); the Port binds one key, which
pmap broadcasts, as nlp_seq_port.py does (a pmap's step takes `(state,
batch)`); the proof hands the written step that key on every device.
"""
import functools

import compare, jax, jax.numpy as jnp, models, numpy as np, optax, train  # pylint: disable=multiple-imports
from flax import linen as nn
from flax.training import train_state
from configs import default

VOCAB, LENGTH, ROWS = 32, 32, 16  # 2 rows per device, as lm1b_mock.py


def port(steps=4):
  config = default.get_config()
  # A warmup of 2 steps (the default's is 1000): the update is not ~0.
  lr = train.create_learning_rate_schedule(
      learning_rate=config.learning_rate, warmup_steps=2)
  train_config = models.TransformerConfig(
      vocab_size=VOCAB, output_vocab_size=VOCAB,
      logits_via_embedding=config.logits_via_embedding,
      dtype=jnp.bfloat16 if config.use_bfloat16 else jnp.float32,
      emb_dim=32, num_heads=2, num_layers=1, qkv_dim=32, mlp_dim=64,
      max_len=LENGTH, dropout_rate=config.dropout_rate,
      attention_dropout_rate=config.attention_dropout_rate,
      deterministic=False, decode=False,
      kernel_init=nn.initializers.xavier_uniform(),
      bias_init=nn.initializers.normal(stddev=1e-6))

  def init():
    m = models.TransformerLM(train_config.replace(deterministic=True))
    params = m.init(jax.random.key(0),
                    jnp.ones((2, LENGTH), jnp.float32))["params"]
    return train_state.TrainState.create(
        apply_fn=m.apply, params=params,
        tx=optax.adamw(lr, b1=0.9, b2=0.98, eps=1e-9,
                       weight_decay=config.weight_decay))

  def batches(i):
    # Tokens 1..VOCAB-1 with a padded tail (0: weight 0, as packed text).
    rng = np.random.default_rng(i)
    inputs = rng.integers(1, VOCAB, (ROWS, LENGTH), dtype=np.int32)
    inputs[:, LENGTH - 4:] = 0
    return {"inputs": inputs}

  step = functools.partial(train.train_step, config=train_config,
                           learning_rate_fn=lr, dropout_rng=jax.random.key(1))
  return compare.Port(name="lm1b", init=init, port_step=None,
      pmap_step=jax.pmap(step, axis_name="batch", donate_argnums=(0,)),
      mesh=jax.make_mesh((8,), ("batch",)), batches=batches, steps=steps)
