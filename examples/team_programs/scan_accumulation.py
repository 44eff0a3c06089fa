"""A flax Linen team program that accumulates gradients inside its own step:
each device's rows are reshaped into `ACCUM` microbatches, `jax.lax.scan`
sums their gradients and losses, the sums are divided by `ACCUM` and the
gradients averaged over the devices once (`jax.lax.pmean`), then Adam on a
linear decay takes one step. The state is replicated and donated.

Its port runs the same step under `jax.jit(jax.shard_map(...))`, the state
replicated and the batch split by rows, so each device scans its own rows'
microbatches as under pmap.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.sharding import Mesh, PartitionSpec as P

FEATURES, HIDDEN, CLASSES, ROWS, ACCUM = 16, 48, 6, 64, 4


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.tanh(nn.Dense(HIDDEN)(x))
    x = nn.tanh(nn.Dense(HIDDEN)(x))
    return nn.Dense(CLASSES)(x)


def create_state(steps=10, seed=0):
  model = MLP()
  params = model.init(jax.random.PRNGKey(seed),
                      jnp.ones((1, FEATURES)))["params"]
  schedule = optax.linear_schedule(1e-2, 1e-3, transition_steps=steps)
  return train_state.TrainState.create(apply_fn=model.apply, params=params,
                                       tx=optax.adam(schedule))


def train_step(state, batch, pmean_in_scan=False, loss_reduce=None):
  """One step on this device's rows, in `ACCUM` microbatches.

  Args:
    state: the replicated `TrainState`.
    batch: this device's rows, `{"x": [rows, FEATURES], "y": [rows]}`.
    pmean_in_scan: average each microbatch's gradients over the devices
      inside the scan, then divide by every device's microbatches.
    loss_reduce: the loss metric's reduction of the microbatches' summed
      loss (None: divided by `ACCUM`, averaged over the devices).

  Returns:
    `(state, metrics)`.
  """
  microbatches = jax.tree.map(
      lambda x: x.reshape((ACCUM, -1) + x.shape[1:]), batch)

  def loss_fn(params, microbatch):
    logits = state.apply_fn({"params": params}, microbatch["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, microbatch["y"]).mean()
    return loss, logits

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def accumulate(carry, microbatch):
    grad_sum, loss_sum, correct = carry
    (loss, logits), grads = grad_fn(state.params, microbatch)
    if pmean_in_scan:
      grads = jax.lax.pmean(grads, "batch")
    correct += jnp.sum(jnp.argmax(logits, -1) == microbatch["y"])
    return (jax.tree.map(jnp.add, grad_sum, grads), loss_sum + loss,
            correct), None

  init = (jax.tree.map(jnp.zeros_like, state.params),
          jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))
  (grads, loss_sum, correct), _ = jax.lax.scan(accumulate, init,
                                               microbatches)
  if pmean_in_scan:
    count = ACCUM * jax.lax.psum(1, "batch")
    grads = jax.tree.map(lambda g: g / count, grads)
  else:
    grads = jax.tree.map(lambda g: g / ACCUM, grads)
    grads = jax.lax.pmean(grads, "batch")
  state = state.apply_gradients(grads=grads)
  loss = (jax.lax.pmean(loss_sum / ACCUM, "batch") if loss_reduce is None
          else loss_reduce(loss_sum))
  accuracy = jax.lax.pmean(correct / batch["y"].shape[0], "batch")
  return state, {"loss": loss, "accuracy": accuracy}


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))


def batches(rows=ROWS):
  """`step -> {"x", "y"}`: a fixed two-layer teacher's labels."""
  r = np.random.default_rng(5)
  w1, w2 = r.normal(size=(FEATURES, 32)), r.normal(size=(32, CLASSES))

  def batch(i):
    x = np.random.default_rng(i).normal(size=(rows, FEATURES))
    y = np.argmax(np.tanh(x @ w1) @ w2, -1)
    return {"x": x.astype(np.float32), "y": y.astype(np.int32)}

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


def pmean_in_scan(mesh):
  """Wrong: the port averages each microbatch's gradients over the mesh
  inside the scan ("reduce as soon as they exist"), then divides the sum by
  all the mesh's microbatches, `ACCUM` times the devices: the pmean had
  already divided by the devices, so the gradients come out 8x small."""
  return make_port_step(mesh, pmean_in_scan=True)


def loss_over_microbatches(mesh):
  """Wrong: the port reports the loss as the jit program's global sum over
  the microbatches' count, `psum(loss_sum) / ACCUM`: averaged over one
  device's microbatches, summed over the devices (8x the loss). Only the
  metric is wrong."""
  return make_port_step(
      mesh, loss_reduce=lambda s: jax.lax.psum(s, "batch") / ACCUM)


WRONG = ("pmean_in_scan", "loss_over_microbatches")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port."""
  import compare  # pylint: disable=g-import-not-at-top
  if wrong is not None and wrong not in WRONG:
    raise ValueError(f"wrong: one of {WRONG} or None, got {wrong!r}")
  mesh = make_mesh(8)
  make = make_port_step if wrong is None else globals()[wrong]
  return compare.Port(
      name="scan_accumulation", init=lambda: create_state(steps),
      pmap_step=p_train_step, port_step=make(mesh), mesh=mesh,
      batches=batches(), steps=steps)
