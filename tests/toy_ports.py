"""A tiny team program and its port, right and wrong, for the `Port` tests.

Linear regression with SGD and momentum, written as a pmap program and
ported to shard_map, built with the public API only (`compare.Port`). Each
`wrong_*` function is one plugging mistake `compare.prove` must refuse with
one line; `python -m compare --program tests.toy_ports:NAME` loads them.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax import lax
from jax.sharding import PartitionSpec as P

import compare

ROWS, FEATURES = 4096, 3


def _loss(params, batch):
  prediction = batch["x"] @ params["w"] + params["b"]
  return jnp.mean((prediction - batch["y"]) ** 2)


def _step(axis):
  def step(state, batch):
    loss, grads = jax.value_and_grad(_loss)(state.params, batch)
    grads = lax.pmean(grads, axis)
    return state.apply_gradients(grads=grads), {"loss": lax.pmean(loss, axis)}
  return step


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
  noise = 0.1 * rng.normal(size=ROWS).astype(np.float32)
  return x, x @ np.array([1.0, -2.0, 0.5], np.float32) + noise


def initial_state():
  return train_state.TrainState.create(
      apply_fn=None, tx=optax.sgd(0.05, momentum=0.9),
      params={"w": np.zeros(FEATURES, np.float32),
              "b": np.zeros((), np.float32)})


def batches(batch_size=64):
  x, y = _data()
  def batch(step):
    start = step * batch_size % ROWS
    return {"x": x[start:start + batch_size], "y": y[start:start + batch_size]}
  return batch


def port(steps=12, port_step=None, **changes):
  """The right port; `changes` replace `compare.Port` fields."""
  mesh = jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  port_step = port_step or jax.jit(jax.shard_map(
      _step("data"), mesh=mesh, in_specs=(P(), P("data")), out_specs=P(),
      check_vma=False))
  right = compare.Port(
      name="toy", init=initial_state,
      pmap_step=jax.pmap(_step("batch"), axis_name="batch"),
      port_step=port_step, mesh=mesh, batches=batches(), steps=steps,
      reference_step=jax.jit(_step_one_device))
  return dataclasses.replace(right, **changes)


def _step_one_device(state, batch):
  loss, grads = jax.value_and_grad(_loss)(state.params, batch)
  return state.apply_gradients(grads=grads), {"loss": loss}


def _drops_bias(state, batch):
  del batch
  return state.replace(params={"w": state.params["w"]}), {"loss": 0.0}


def _float16_weights(state, batch):
  del batch
  params = {**state.params, "w": state.params["w"].astype(jnp.float16)}
  return state.replace(params=params), {"loss": 0.0}


def _longer_weights(state, batch):
  del batch
  params = {**state.params, "w": jnp.zeros(FEATURES + 1)}
  return state.replace(params=params), {"loss": 0.0}


def wrong_tree():
  return port(port_step=_drops_bias)


def wrong_dtype():
  return port(port_step=_float16_weights)


def wrong_shape():
  return port(port_step=_longer_weights)


def wrong_split():
  return port(batches=batches(batch_size=60))


def wrong_callable():
  return port(port_step="not a function")


def wrong_reference():
  return port(reference_step=_drops_bias)


def wrong_state():
  return port(init=lambda: {"w": np.zeros(3, np.float32)})


def _raises(*args):
  del args
  raise RuntimeError("the team's code broke\nsecond line")


def init_raises():
  return port(init=_raises)


def batches_raise():
  return port(batches=_raises)


def evaluate_raises():
  return port(evaluate=_raises)


def factory_raises():
  _raises()


def _device0_loss_off_from(first_step):
  """pmap's step, its reported loss x 1.01 on device 0 from `first_step`
  (a wrong reduction of a metric: the state stays right)."""
  right = _step("batch")

  def step(state, batch):
    state_after, metrics = right(state, batch)
    wrong = (lax.axis_index("batch") == 0) & (state.step + 1 >= first_step)
    loss = jnp.where(wrong, metrics["loss"] * 1.01, metrics["loss"])
    return state_after, {"loss": loss}

  return step


def pmap_metric_off_from(first_step=5):
  """The right port; pmap's own step reports device 0's loss 1% high from
  `first_step` on."""
  return port(pmap_step=jax.pmap(_device0_loss_off_from(first_step),
                                 axis_name="batch"))


def _other_tx(state, batch):
  state, metrics = _step_one_device(state, batch)
  return state.replace(tx=optax.sgd(0.1)), metrics


def wrong_static():
  return port(port_step=_other_tx)


def broadcast_pmap_port():
  """The right port; pmap'd the new way, as flax's imagenet example does
  today: the state broadcast (`in_axes=(None, 0), out_axes=(None, 0)`)."""
  return port(pmap_step=jax.pmap(_step("batch"), axis_name="batch",
                                 in_axes=(None, 0), out_axes=(None, 0)))
