"""A stand-in with the pmap constructs of flax's examples/wmt/train.py.

Written as that file writes them, on a tiny model and synthetic tokens:
`per_host_sum_pmap` (`jax.pmap(..., devices=devices)`), a train step of
`functools.partial` with `donate_argnums=(0,)` called with
`dropout_rng=dropout_rngs`, an eval step, a cache initialised per device and
a predict step with `static_broadcasted_argnums=(3, 4)` (eos id and the
decode length). Prints every number it computes.
"""

import collections
import functools

from flax import jax_utils
from flax import linen as nn
from flax.training import common_utils
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax

VOCAB, LENGTH, WIDTH = 32, 12, 16


class Translator(nn.Module):
  """A token embedding, a dropout and a dense layer back to the vocabulary."""

  @nn.compact
  def __call__(self, inputs, train):
    x = nn.Embed(VOCAB, WIDTH)(inputs)
    x = nn.Dropout(0.1, deterministic=not train)(x)
    return nn.Dense(VOCAB)(nn.relu(nn.Dense(WIDTH)(x)))


def train_step(state, batch, config, learning_rate_fn, label_smoothing=0.0,
               dropout_rng=None):
  dropout_rng = jax.random.fold_in(dropout_rng, state.step)

  def loss_fn(params):
    logits = state.apply_fn({"params": params}, batch["inputs"], train=True,
                            rngs={"dropout": dropout_rng})
    soft = optax.smooth_labels(jax.nn.one_hot(batch["targets"], VOCAB),
                               label_smoothing)
    return jnp.mean(optax.softmax_cross_entropy(logits, soft)), logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  grads = jax.lax.pmean(grads, axis_name="batch")
  new_state = state.apply_gradients(grads=grads)
  accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["targets"])
  metrics = {"loss": loss * config["scale"], "accuracy": accuracy,
             "learning_rate": learning_rate_fn(state.step)}
  return new_state, jax.lax.pmean(metrics, axis_name="batch")


def eval_step(params, batch, config):
  logits = Translator().apply({"params": params}, batch["inputs"],
                              train=False)
  loss = optax.softmax_cross_entropy_with_integer_labels(
      logits, batch["targets"])
  return jax.lax.psum({"loss": jnp.sum(loss) * config["scale"],
                       "denominator": jnp.float32(loss.size)}, "batch")


def initialize_cache(inputs, max_decode_len, config):
  del config
  return jnp.zeros((inputs.shape[0], max_decode_len), jnp.int32)


def predict_step(inputs, params, cache, eos_id, max_decode_len, config,
                 beam_size=4):
  del config, beam_size
  logits = Translator().apply({"params": params}, inputs, train=False)
  tokens = jnp.argmax(logits, -1)[:, :max_decode_len]
  tokens = jnp.where(jnp.cumsum(tokens == eos_id, axis=1) > 1, 0, tokens)
  return cache.at[:, :tokens.shape[1]].set(tokens)


def per_host_sum_pmap(in_tree):
  """Execute psum on in_tree"s leaves over one device per host."""
  host2devices = collections.defaultdict(list)
  for d in jax.devices():
    host2devices[d.process_index].append(d)
  devices = [host2devices[k][0] for k in host2devices]
  host_psum = jax.pmap(lambda x: jax.lax.psum(x, "i"), "i", devices=devices)

  def pre_pmap(xs):
    return jax.tree_util.tree_map(
        lambda x: jnp.broadcast_to(x, (1,) + x.shape), xs)

  def post_pmap(xs):
    return jax.tree_util.tree_map(
        lambda x: x.addressable_shards[0].data.squeeze(0), xs)

  return post_pmap(host_psum(pre_pmap(in_tree)))


def main():
  rng = np.random.default_rng(0)
  batches = [{"inputs": rng.integers(1, VOCAB, (64, LENGTH)),
              "targets": rng.integers(1, VOCAB, (64, LENGTH))}
             for _ in range(6)]
  for batch in batches:
    batch["targets"] = (batch["inputs"] * 3 + 1) % VOCAB
  model = Translator()
  params = model.init(jax.random.key(0), batches[0]["inputs"],
                      train=False)["params"]
  learning_rate_fn = optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, 20)
  state = train_state.TrainState.create(
      apply_fn=model.apply, params=params,
      tx=optax.adamw(learning_rate_fn, weight_decay=0.1))
  state = jax_utils.replicate(state)
  config = {"scale": 1.0}
  p_train_step = jax.pmap(
      functools.partial(
          train_step,
          config=config,
          learning_rate_fn=learning_rate_fn,
          label_smoothing=0.1,
      ),
      axis_name="batch",
      donate_argnums=(0,),
  )
  p_eval_step = jax.pmap(
      functools.partial(eval_step, config=config), axis_name="batch"
  )
  p_init_cache = jax.pmap(
      functools.partial(initialize_cache, max_decode_len=LENGTH,
                        config=config),
      axis_name="batch",
  )
  p_pred_step = jax.pmap(
      functools.partial(predict_step, config=config, beam_size=4),
      axis_name="batch",
      static_broadcasted_argnums=(3, 4),
  )
  dropout_rngs = jax.random.split(jax.random.key(1), jax.local_device_count())
  for step, batch in enumerate(batches):
    batch = common_utils.shard(batch)
    state, metrics = p_train_step(state, batch, dropout_rng=dropout_rngs)
    metrics = jax.tree.map(lambda x: repr(float(x[0])), metrics)
    print("train", step, sorted(metrics.items()))
  eval_batch = common_utils.shard(batches[0])
  sums = jax.tree.map(lambda x: x[0], p_eval_step(state.params, eval_batch))
  print("eval loss", repr(float(sums["loss"] / sums["denominator"])))
  cache = p_init_cache(eval_batch["inputs"])
  predicted = p_pred_step(eval_batch["inputs"], state.params, cache, 7,
                          LENGTH)
  predicted = np.asarray(predicted).reshape(64, LENGTH)
  print("predicted", predicted[:2].tolist())
  matches = per_host_sum_pmap(np.array([float((predicted == 7).sum()), 1.0]))
  print("bleu-style sums", np.asarray(matches).tolist())


if __name__ == "__main__":
  main()
