"""A plain-`jit` port of a flax Linen `TrainState` step, and the pmap original.

The program: a small Linen model with BatchNorm and dropout, trained with
SGD and momentum under `optax.MultiSteps` (gradient accumulation over two
steps). The pmap original averages the gradients, the loss and BatchNorm's
statistics over its axis; its port (region `plain-jit-port`, quoted in
docs/MIGRATION.md#plain-jit) is the one-device step under `jax.jit` on a
mesh: the state replicated, the batch split by rows, and no collective
written, since jit's body sees the global batch. `port` describes both as a
`compare.Port`; tests/test_plain_jit.py proves it and its wrong twins.

The dropout mask is drawn from a key per step and shared by the batch's
rows (`broadcast_dims=(0,)`), so pmap's devices rightly draw the same mask
and jit's one draw equals theirs. A per-row mask from a key per device
(docs/MIGRATION.md#dropout) needs the device index, which plain `jit` does
not have: such a program keeps `shard_map`, or changes its random stream.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import compare

# The region imports what the guide's page imports lack, so that it runs
# pasted after them.
# region: plain-jit-port
from flax.training import train_state

KEY = jax.random.key(1)  # the dropout stream, folded with the step

class Net(nn.Module):  # pmap's had axis_name="batch"; jit sees every row
  axis_name: str | None = None
  @nn.compact
  def __call__(self, x, train=True):
    x = nn.BatchNorm(not train, axis_name=self.axis_name)(nn.Dense(16)(x))
    x = nn.Dropout(0.25, broadcast_dims=(0,))(x, not train)  # a mask per step
    return nn.Dense(1)(nn.relu(x))

class State(train_state.TrainState):  # tx=optax.MultiSteps(opt, k) accumulates
  batch_stats: dict

def make_jit_step(mesh, model=Net()):  # the one-device step: no pmean
  def train_step(state, batch):
    def loss_fn(params):
      y, new = model.apply(
          {"params": params, "batch_stats": state.batch_stats}, batch["x"],
          rngs={"dropout": jax.random.fold_in(KEY, state.step)},
          mutable=["batch_stats"])
      return jnp.mean((y - batch["y"]) ** 2), new["batch_stats"]
    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params)
    return state.apply_gradients(grads=grads, batch_stats=stats), loss
  state, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  return jax.jit(train_step, in_shardings=(state, rows),
                 out_shardings=(state, state), donate_argnums=0)
# endregion


def create_state(model=Net(), features=4, accumulate=2):
  """The initial state: SGD with momentum, accumulated over `accumulate`
  steps by `optax.MultiSteps` (its accumulator is a leaf of the state)."""
  variables = model.init(jax.random.key(0), jnp.ones((1, features)), False)
  tx = optax.MultiSteps(optax.sgd(0.1, momentum=0.9), accumulate)
  return State.create(apply_fn=model.apply, params=variables["params"],
                      batch_stats=variables["batch_stats"], tx=tx)


def make_pmap_step():
  """The pmap original: per-device rows, gradients and loss pmean'd,
  BatchNorm's statistics averaged over the same axis."""
  model = Net(axis_name="batch")

  def train_step(state, batch):
    key = jax.random.fold_in(KEY, state.step)

    def loss_fn(params):
      y, new = model.apply(
          {"params": params, "batch_stats": state.batch_stats}, batch["x"],
          rngs={"dropout": key}, mutable=["batch_stats"])
      return jnp.mean((y - batch["y"]) ** 2), new["batch_stats"]

    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params)
    grads = lax.pmean(grads, "batch")
    return (state.apply_gradients(grads=grads, batch_stats=stats),
            lax.pmean(loss, "batch"))
  # flax's style today: the state broadcast in and out, the batch mapped.
  return jax.pmap(train_step, axis_name="batch", in_axes=(None, 0),
                  out_axes=(None, None))


def batches(rows=64, features=4):
  """Global host batches of a noisy linear target, one per 0-based step."""
  w = np.random.default_rng(0).normal(size=(features, 1)).astype(np.float32)

  def batch(step):
    x = np.random.default_rng(step + 1).normal(
        size=(rows, features)).astype(np.float32)
    return {"x": x, "y": x @ w + 0.1 * np.tanh(x[:, :1])}
  return batch


def _jit(mesh, train_step):
  state, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  return jax.jit(train_step, in_shardings=(state, rows),
                 out_shardings=(state, state))


def per_shard_statistics_step(mesh):
  """Wrong: BatchNorm normalises each device's rows by their own
  statistics, as a port that maps the model over the shards (`vmap`) with
  no axis to average them over does."""
  model, n = Net(), mesh.shape["data"]

  def train_step(state, batch):
    key = jax.random.fold_in(KEY, state.step)

    def loss_fn(params):
      def shard(x):
        return model.apply(
            {"params": params, "batch_stats": state.batch_stats}, x,
            rngs={"dropout": key}, mutable=["batch_stats"])
      x = batch["x"].reshape(n, -1, batch["x"].shape[-1])
      y, new = jax.vmap(shard)(x)
      stats = jax.tree.map(lambda s: s.mean(0), new["batch_stats"])
      return jnp.mean((y.reshape(batch["y"].shape) - batch["y"]) ** 2), stats

    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params)
    return state.apply_gradients(grads=grads, batch_stats=stats), loss
  return _jit(mesh, train_step)


def stale_key_step(mesh):
  """Wrong: the dropout key never advances (every step draws step 0's
  mask), so the port first differs from pmap at step 2."""
  step = make_jit_step(mesh)

  def stale(state, batch):  # the key reads a step counter held at 0
    count = state.step
    new, loss = step(state.replace(step=jnp.zeros_like(count)), batch)
    return new.replace(step=count + 1), loss
  return stale


def port(port_step=make_jit_step, steps=4):
  """The pmap original and its plain-jit port, for `compare.prove`."""
  mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
  return compare.Port(
      name="plain_jit", init=create_state, pmap_step=make_pmap_step(),
      port_step=port_step(mesh), mesh=mesh, batches=batches(), steps=steps)
