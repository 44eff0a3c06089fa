"""flax's examples/nlp_seq train step as a `compare.Port`, so that
`python -m compare.rewrite train.py -o train_port.py --prove
nlp_seq_port:port` proves the rewrite of its `p_train_step` (run from the
example's folder, beside its train.py and models.py)."""
import functools

import compare, jax, models, numpy as np, optax, train  # pylint: disable=multiple-imports
from flax.training import train_state


def port(steps=6):
  config = models.TransformerConfig(vocab_size=60, output_vocab_size=15,
      max_len=32, emb_dim=64, qkv_dim=64, mlp_dim=128, num_layers=2)
  model, lr = models.Transformer(config), train.create_learning_rate_scheduler(
      base_learning_rate=0.05)
  def init():
    params = model.init(jax.random.key(0), inputs=np.ones((1, 32), np.int32),
                        train=False)["params"]
    return train_state.TrainState.create(apply_fn=model.apply, params=params,
        tx=optax.adamw(lr, b1=0.9, b2=0.98, eps=1e-9, weight_decay=1e-1))
  def batches(i):
    rng = np.random.default_rng(i)
    return {"inputs": rng.integers(1, 60, (64, 32)),
            "targets": rng.integers(1, 15, (64, 32))}
  step = functools.partial(train.train_step, model=model, learning_rate_fn=lr,
                           dropout_rng=jax.random.key(1))
  return compare.Port(name="nlp_seq", init=init, port_step=None,
      pmap_step=jax.pmap(step, axis_name="batch", donate_argnums=(0,)),
      mesh=jax.make_mesh((8,), ("batch",)), batches=batches, steps=steps)
