"""flax-lm1b-like: a train flag and a dropout rate static (3, 4), the state
donated, a dropout key per device. Input of tests/test_rewrite_static.py."""

import functools

from flax import jax_utils
import flax.linen as nn
from flax.training import common_utils
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax


class Model(nn.Module):
  rate: float = 0.0

  @nn.compact
  def __call__(self, x, train):
    x = nn.Dropout(self.rate, deterministic=not train)(nn.Dense(32)(x))
    return nn.Dense(4)(nn.relu(x))


def apply_model(params, x, rng, train, rate):
  return Model(rate).apply({"params": params}, x, train, rngs={"dropout": rng})


@functools.partial(jax.pmap, axis_name="batch", donate_argnums=(0,),
                   static_broadcasted_argnums=(3, 4))
def train_step(state, batch, rng, train, rate):
  rng = jax.random.fold_in(rng, state.step)
  def loss_fn(params):
    logits = apply_model(params, batch["x"], rng, train, rate)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  if train:
    state = state.apply_gradients(grads=jax.lax.pmean(grads, "batch"))
  return state, {"loss": jax.lax.pmean(loss, "batch")}


params = Model().init(jax.random.key(0), jnp.ones((1, 16)), False)["params"]
state = jax_utils.replicate(train_state.TrainState.create(
    apply_fn=None, params=params, tx=optax.adam(1e-2)))
rngs = jax.random.split(jax.random.key(1), jax.local_device_count())
data = np.random.default_rng(0)
for step in range(5):
  x = data.normal(size=(64, 16)).astype(np.float32)
  batch = common_utils.shard({"x": x, "y": x[:, :4].argmax(-1)})
  state, metrics = train_step(state, batch, rngs, False, 0.0)  # evaluate
  print(step, repr(float(jax_utils.unreplicate(metrics)["loss"])))
  state, _ = train_step(state, batch, rngs, True, 0.1)
params = jax.device_get(jax_utils.unreplicate(state).params)
print(repr(sum(float(np.sum(p)) for p in jax.tree.leaves(params))))
