"""A flax Linen team program after flax's examples/lm1b and examples/wmt: a
tiny decoder-only transformer LM (token and position embeddings, one causal
self-attention block, dropout, LayerNorm, a dense head), label-smoothed
cross-entropy over the non-padding tokens, AdamW whose weight decay skips
biases and LayerNorm scales, on warm-up and cosine decay.

As in those examples, the host splits one dropout key per device
(`common_utils.shard_prng_key`) and the step folds in `state.step`; the
state is replicated (`jax_utils.replicate`) and donated. Its port passes the
same per-device keys split over the mesh, as it does the batch.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util
from flax.training import common_utils
from flax.training import train_state
from jax.sharding import Mesh, PartitionSpec as P

VOCAB, LENGTH, EMBED, HEADS, MLP_DIM, ROWS = 64, 16, 32, 4, 64, 16
DROPOUT, LABEL_SMOOTHING = 0.1, 0.1


class TinyLM(nn.Module):
  """Decoder-only: shift right, embed, one pre-LN block, LayerNorm, head."""

  @nn.compact
  def __call__(self, inputs, train: bool):
    y = jnp.pad(inputs, ((0, 0), (1, 0)))[:, :-1]  # shift right
    mask = nn.combine_masks(nn.make_attention_mask(inputs > 0, inputs > 0),
                            nn.make_causal_mask(inputs))
    x = nn.Embed(VOCAB, EMBED)(y)
    x = x + self.param("pos_embedding", nn.initializers.normal(0.02),
                       (1, LENGTH, EMBED))
    x = nn.Dropout(DROPOUT, deterministic=not train)(x)
    h = nn.MultiHeadDotProductAttention(
        num_heads=HEADS, dropout_rate=DROPOUT, deterministic=not train)(
            nn.LayerNorm()(x), mask=mask)
    x = x + nn.Dropout(DROPOUT, deterministic=not train)(h)
    h = nn.Dense(EMBED)(nn.gelu(nn.Dense(MLP_DIM)(nn.LayerNorm()(x))))
    x = x + nn.Dropout(DROPOUT, deterministic=not train)(h)
    return nn.Dense(VOCAB)(nn.LayerNorm()(x))


def decay_mask_fn(params):
  """Weight decay on the kernels and embeddings only."""
  flat = traverse_util.flatten_dict(params)
  return traverse_util.unflatten_dict(
      {path: path[-1] not in ("bias", "scale") for path in flat})


def create_learning_rate_fn(steps):
  return optax.warmup_cosine_decay_schedule(
      init_value=3e-4, peak_value=3e-3, warmup_steps=max(1, steps // 4),
      decay_steps=steps)


def create_state(steps=10, seed=0):
  model = TinyLM()
  params = model.init(jax.random.PRNGKey(seed),
                      jnp.ones((1, LENGTH), jnp.int32), train=False)["params"]
  tx = optax.adamw(create_learning_rate_fn(steps), b1=0.9, b2=0.98,
                   weight_decay=0.1, mask=decay_mask_fn)
  return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                       tx=tx)


def compute_weighted_cross_entropy(logits, targets, weights):
  """Label-smoothed cross-entropy summed over the weighted tokens, as wmt."""
  confidence = 1.0 - LABEL_SMOOTHING
  low_confidence = LABEL_SMOOTHING / (VOCAB - 1)
  normalizing_constant = -(
      confidence * jnp.log(confidence)
      + (VOCAB - 1) * low_confidence * jnp.log(low_confidence + 1e-20))
  soft_targets = common_utils.onehot(targets, VOCAB, on_value=confidence,
                                     off_value=low_confidence)
  loss = -jnp.sum(soft_targets * nn.log_softmax(logits), axis=-1)
  loss = (loss - normalizing_constant) * weights
  return loss.sum(), weights.sum()


def train_step(state, batch, dropout_rng, learning_rate_fn, global_mean=False):
  """One step on this device's rows; `dropout_rng` is this device's key."""
  inputs = batch["inputs"]
  weights = jnp.where(inputs > 0, 1.0, 0.0)
  dropout_rng = jax.random.fold_in(dropout_rng, state.step)
  # global_mean: normalised by every device's tokens (see the wrong port).
  tokens = jax.lax.psum(weights.sum(), "batch") if global_mean else None

  def loss_fn(params):
    logits = state.apply_fn({"params": params}, inputs, train=True,
                            rngs={"dropout": dropout_rng})
    loss, weight_sum = compute_weighted_cross_entropy(logits, inputs, weights)
    return loss / (weight_sum if tokens is None else tokens), logits

  (_, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
  grads = (jax.lax.psum if global_mean else jax.lax.pmean)(grads, "batch")
  new_state = state.apply_gradients(grads=grads)
  loss, weight_sum = compute_weighted_cross_entropy(logits, inputs, weights)
  accuracy = ((jnp.argmax(logits, -1) == inputs) * weights).sum()
  metrics = jax.lax.psum({"loss": loss, "accuracy": accuracy,
                          "denominator": weight_sum}, "batch")
  metrics["learning_rate"] = learning_rate_fn(state.step)
  return new_state, metrics


def batches(rows=ROWS):
  """`step -> {"inputs": int32 [rows, LENGTH]}`, 0-padded after a length."""
  def batch(i):
    r = np.random.default_rng(i)
    tokens = r.integers(1, VOCAB, size=(rows, LENGTH))
    lengths = r.integers(LENGTH // 4, LENGTH + 1, size=(rows, 1))
    tokens = np.where(np.arange(LENGTH) < lengths, tokens, 0)
    return {"inputs": tokens.astype(np.int32)}
  return batch


def make_pmap_step(steps):
  return jax.pmap(functools.partial(
      train_step, learning_rate_fn=create_learning_rate_fn(steps)),
                  axis_name="batch", donate_argnums=(0,))


def make_mesh(n=8):
  return Mesh(np.array(jax.devices()[:n]), ("batch",))


def make_port_step(mesh, steps, rng_spec=P("batch"), **wrong):
  """`port_step(state, batch, dropout_rngs)`, the keys split like rows."""
  step = functools.partial(
      train_step, learning_rate_fn=create_learning_rate_fn(steps), **wrong)

  def body(state, batch, dropout_rngs):
    # A device's block of the [devices, 2] keys is [1, 2]: its own key.
    rng = dropout_rngs[0] if dropout_rngs.ndim == 2 else dropout_rngs
    return step(state, batch, rng)

  # check_vma=False: grad returns each device's own gradient, as under
  # pmap, so train_step's pmean is right.
  return jax.jit(jax.shard_map(body, mesh=mesh,
                               in_specs=(P(), P("batch"), rng_spec),
                               out_specs=(P(), P()), check_vma=False),
                 donate_argnums=(0,))


def one_dropout_key(mesh, steps):
  """Wrong: the port passes the host's one key, replicated ("per-device keys
  are a pmap thing"): every device draws the same dropout masks."""
  return make_port_step(mesh, steps, rng_spec=P())


def global_token_mean(mesh, steps):
  """Wrong: the port normalises the loss by the global token count and sums
  the gradients (the jit program's token mean); pmap averages each device's
  own token mean, and the devices' padding differs."""
  return make_port_step(mesh, steps, global_mean=True)


WRONG = ("one_dropout_key", "global_token_mean")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port."""
  import compare  # pylint: disable=g-import-not-at-top
  if wrong is not None and wrong not in WRONG:
    raise ValueError(f"wrong: one of {WRONG} or None, got {wrong!r}")
  mesh = make_mesh(8)
  rng = jax.random.PRNGKey(1)
  dropout_rngs = common_utils.shard_prng_key(rng)  # one key per device
  make = make_port_step if wrong is None else globals()[wrong]
  port_rngs = rng if wrong == "one_dropout_key" else dropout_rngs
  return compare.Port(
      name="linen_lm_dropout", init=lambda: create_state(steps),
      pmap_step=compare.adapt_step(make_pmap_step(steps),
                                   static_args=(dropout_rngs,)),
      port_step=compare.adapt_step(make(mesh, steps),
                                   static_args=(port_rngs,)),
      mesh=mesh, batches=batches(), steps=steps)
