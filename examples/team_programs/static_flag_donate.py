"""A flax Linen team program with a static flag: an MLP with dropout whose
pmap step takes a Python bool third argument (`use_label_smoothing`,
`static_broadcasted_argnums=(2,)`) and donates its state
(`donate_argnums=(0,)`), the dropout key folded with the step and the
device's index, three metrics in a dict (loss, accuracy, grad norm).

Its port: `jax.jit(..., static_argnums=(2,), donate_argnums=(0,))` around a
`jax.shard_map` of the same step, the flag closed over with
`functools.partial`.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import Mesh, PartitionSpec as P


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.relu(nn.Dense(64)(x))
    x = nn.Dropout(0.2, deterministic=not train)(x)
    return nn.Dense(10)(x)


class TrainState(train_state.TrainState):
  dropout_rng: jax.Array


def create_state(seed=0):
  model = MLP()
  params_rng, dropout_rng = jax.random.split(jax.random.PRNGKey(seed))
  params = model.init(params_rng, jnp.ones((1, 20)), train=False)["params"]
  return TrainState.create(apply_fn=model.apply, params=params,
                           tx=optax.adam(3e-3), dropout_rng=dropout_rng)


def batches(rows=64):
  w = np.random.default_rng(7).normal(size=(20, 10))
  def batch(i):
    x = np.random.default_rng(i).normal(size=(rows, 20)).astype(np.float32)
    return {"x": x, "y": (x @ w).argmax(1).astype(np.int32)}
  return batch


def train_step(state, batch, use_label_smoothing=False, split_rng=True):
  rng = jax.random.fold_in(state.dropout_rng, state.step)
  if split_rng:  # each device its own dropout mask
    rng = jax.random.fold_in(rng, jax.lax.axis_index("batch"))
  labels = jax.nn.one_hot(batch["y"], 10)
  if use_label_smoothing:
    labels = optax.smooth_labels(labels, 0.1)

  def loss_fn(params):
    logits = state.apply_fn({"params": params}, batch["x"], train=True,
                            rngs={"dropout": rng})
    return optax.softmax_cross_entropy(logits, labels).mean(), logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  grads = jax.lax.pmean(grads, "batch")
  state = state.apply_gradients(grads=grads)
  accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
  metrics = {"loss": jax.lax.pmean(loss, "batch"),
             "accuracy": jax.lax.pmean(accuracy, "batch"),
             "grad_norm": optax.global_norm(grads)}
  return state, metrics


# Called as p_train_step(state, shard(batch), True) on a replicated state.
p_train_step = jax.pmap(train_step, axis_name="batch",
                        static_broadcasted_argnums=(2,), donate_argnums=(0,))


def make_mesh(n=8):
  return Mesh(np.array(jax.devices()[:n]), ("batch",))


def make_port_step(mesh, keep_flag=True, split_rng=True):
  """The port: `port_step(state, batch, use_label_smoothing)`."""
  @functools.partial(jax.jit, static_argnums=(2,), donate_argnums=(0,))
  def port_step(state, batch, use_label_smoothing):
    kwargs = {"use_label_smoothing": use_label_smoothing} if keep_flag else {}
    body = functools.partial(train_step, split_rng=split_rng, **kwargs)
    # check_vma=False: grad returns each device's own gradient, as under
    # pmap, so train_step's pmean is right.
    return jax.shard_map(body, mesh=mesh, in_specs=(P(), P("batch")),
                         out_specs=(P(), P()), check_vma=False)(state, batch)
  return port_step


def flag_lost(mesh):
  """Wrong: the flag reaches the jitted wrapper (static_argnums=(2,)) but
  not the step: shard_map's body is train_step on (state, batch) only, so
  its default (no label smoothing) runs."""
  return make_port_step(mesh, keep_flag=False)


def rng_not_split(mesh):
  """Wrong: the dropout key not folded with the device's index ("the state
  is replicated now, the rows differ anyway"): every device drops the same
  units."""
  return make_port_step(mesh, split_rng=False)


WRONG = ("flag_lost", "rng_not_split")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port,
  both steps called with `use_label_smoothing=True`."""
  import compare  # pylint: disable=g-import-not-at-top
  mesh = make_mesh(8)
  make = make_port_step if wrong is None else globals()[wrong]
  return compare.Port(
      name="static_flag_donate", init=create_state,
      pmap_step=compare.adapt_step(p_train_step, static_args=(True,)),
      port_step=compare.adapt_step(make(mesh), static_args=(True,)),
      mesh=mesh, batches=batches(), steps=steps)
