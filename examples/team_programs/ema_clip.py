"""A flax Linen team program whose train state carries an exponential moving
average of its parameters (`ema_params`, decay 0.99, updated after every
optimiser step from the new parameters), trained by SGD with momentum behind
global-norm clipping (`optax.chain(optax.clip_by_global_norm(0.5),
optax.sgd(lr, momentum=0.9))`).

The gradients are averaged over the devices before the optimiser sees them,
so the clipping sees the global gradient; the state is replicated and
donated, as flax's examples write it.
"""

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import Mesh, PartitionSpec as P

FEATURES, HIDDEN, CLASSES, ROWS = 24, 64, 8, 64
EMA_DECAY, CLIP_NORM = 0.99, 0.5


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(HIDDEN)(x))
    x = nn.relu(nn.Dense(HIDDEN)(x))
    return nn.Dense(CLASSES)(x)


class TrainState(train_state.TrainState):
  ema_params: Any


def create_state(steps=10, seed=0):
  model = MLP()
  params = model.init(jax.random.PRNGKey(seed),
                      jnp.ones((1, FEATURES)))["params"]
  schedule = optax.cosine_decay_schedule(0.1, decay_steps=steps, alpha=0.1)
  tx = optax.chain(optax.clip_by_global_norm(CLIP_NORM),
                   optax.sgd(schedule, momentum=0.9))
  return TrainState.create(apply_fn=model.apply, params=params, tx=tx,
                           ema_params=params)


def update_ema(ema_params, params, decay=EMA_DECAY):
  return jax.tree.map(lambda e, p: decay * e + (1.0 - decay) * p,
                      ema_params, params)


def train_step(state, batch, ema_from_new=True, reduce_updates=False):
  """One step on this device's rows: pmean, clip and SGD, then the EMA.

  Args:
    state: the replicated `TrainState`.
    batch: this device's rows, `{"x", "y"}`.
    ema_from_new: the EMA moves toward the new parameters (False: toward
      the ones the step started from).
    reduce_updates: run the optimiser on each device's own gradient and
      average its updates instead (the clipping then sees per-device
      gradients).

  Returns:
    `(state, metrics)`.
  """
  def loss_fn(params):
    logits = state.apply_fn({"params": params}, batch["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()
    return loss, logits

  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  if reduce_updates:
    updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
    updates = jax.lax.pmean(updates, "batch")
    new_state = state.replace(
        step=state.step + 1, opt_state=opt_state,
        params=optax.apply_updates(state.params, updates))
  else:
    grads = jax.lax.pmean(grads, "batch")
    new_state = state.apply_gradients(grads=grads)
  ema_toward = new_state.params if ema_from_new else state.params
  new_state = new_state.replace(
      ema_params=update_ema(state.ema_params, ema_toward))
  accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
  metrics = {"loss": jax.lax.pmean(loss, "batch"),
             "accuracy": jax.lax.pmean(accuracy, "batch"),
             "grad_norm": optax.global_norm(grads)}
  return new_state, metrics


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))


def batches(rows=ROWS):
  """`step -> {"x", "y"}`: a fixed random teacher's labels, noisy features
  (the loss stays high, so the clipping stays on)."""
  teacher = np.random.default_rng(99).normal(size=(FEATURES, CLASSES))

  def batch(i):
    x = np.random.default_rng(i).normal(size=(rows, FEATURES))
    noise = np.random.default_rng(i + 10_000).normal(size=(rows, CLASSES))
    y = np.argmax(x @ teacher + 3.0 * noise, -1)
    return {"x": (2.0 * x).astype(np.float32), "y": y.astype(np.int32)}

  return batch


def make_mesh(n=8):
  return Mesh(np.array(jax.devices()[:n]), ("batch",))


def make_port_step(mesh, **wrong):
  # check_vma=False: grad returns each device's own gradient, as under
  # pmap, so train_step's pmean is right.
  body = functools.partial(train_step, **wrong)
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("batch")),
                               out_specs=(P(), P()), check_vma=False),
                 donate_argnums=(0,))


def ema_before_update(mesh):
  """Wrong: the port's rewrite of the step moves the EMA above
  `apply_gradients`, so it averages in the parameters the step started
  from, one step late."""
  return make_port_step(mesh, ema_from_new=False)


def updates_averaged(mesh):
  """Wrong: the port runs the optimiser on each device's own gradient and
  averages the updates ("what must agree is the update"): the same for
  plain SGD, but the clipping sees per-device gradients (each clipped to
  0.5 on its own) and each device keeps its own momentum (the first
  device's comes back)."""
  return make_port_step(mesh, reduce_updates=True)


WRONG = ("ema_before_update", "updates_averaged")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port."""
  import compare  # pylint: disable=g-import-not-at-top
  if wrong is not None and wrong not in WRONG:
    raise ValueError(f"wrong: one of {WRONG} or None, got {wrong!r}")
  mesh = make_mesh(8)
  make = make_port_step if wrong is None else globals()[wrong]
  return compare.Port(
      name="ema_clip", init=lambda: create_state(steps),
      pmap_step=p_train_step, port_step=make(mesh), mesh=mesh,
      batches=batches(), steps=steps)
