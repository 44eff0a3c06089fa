"""An equinox team program: Linear -> BatchNorm -> relu -> Linear, stateful
(`eqx.nn.make_with_state`), trained with `optax.adam`.

The state is `(model, bn_state, opt_state)`: the model whole (its BatchNorm
keeps its `axis_name` strings and `inference` flag among its leaves), the
`eqx.nn.State` of BatchNorm's running statistics and optax's state. The
model runs on one example and is `jax.vmap`'d over the rows (axis
"batch"); the step is `eqx.filter_pmap`'d over the devices (axis
"devices") with the state broadcast (`in_axes=(None, 0)`, `out_axes=(None,
0)`). BatchNorm's statistics are averaged over both axes:
`axis_name=("batch", "devices")`.

The port runs the same step under `eqx.filter_jit` over `jax.shard_map`:
the state's arrays (`eqx.partition`) replicated on the mesh, the batch
split by rows, `check_vma=False` so that the gradient is each device's
own, as under pmap.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, PartitionSpec as P

FEATURES, HIDDEN, CLASSES, ROWS = 16, 32, 4, 64
DEVICES = "devices"
optim = optax.adam(3e-3)


class Model(eqx.Module):
  """Linear -> BatchNorm -> relu -> Linear, on one example."""

  linear1: eqx.nn.Linear
  bn: eqx.nn.BatchNorm
  linear2: eqx.nn.Linear

  def __init__(self, key, axis_name=("batch", DEVICES)):
    key1, key2 = jax.random.split(key)
    self.linear1 = eqx.nn.Linear(FEATURES, HIDDEN, key=key1)
    self.bn = eqx.nn.BatchNorm(HIDDEN, axis_name=axis_name, momentum=0.9,
                               mode="batch")
    self.linear2 = eqx.nn.Linear(HIDDEN, CLASSES, key=key2)

  def __call__(self, x, state):
    x, state = self.bn(self.linear1(x), state)
    return self.linear2(jax.nn.relu(x)), state


def create(seed: int = 0, axis_name=("batch", DEVICES)):
  """`(model, bn_state, opt_state)` on the host (`axis_name`: BatchNorm's
  axes)."""
  model, bn_state = eqx.nn.make_with_state(Model)(jax.random.key(seed),
                                                  axis_name)
  opt_state = optim.init(eqx.filter(model, eqx.is_array))
  return model, bn_state, opt_state


def loss_fn(model, bn_state, batch):
  batch_model = jax.vmap(model, axis_name="batch", in_axes=(0, None),
                         out_axes=(0, None))
  logits, bn_state = batch_model(batch["x"], bn_state)
  loss = optax.softmax_cross_entropy_with_integer_labels(
      logits, batch["y"]).mean()
  return loss, bn_state


def train_step(state, batch, reduce=jax.lax.pmean,
               loss_reduce=jax.lax.pmean):
  """One step under an axis named `DEVICES`.

  Args:
    state: `(model, bn_state, opt_state)`.
    batch: this device's rows, `{"x": [rows, FEATURES], "y": [rows]}`.
    reduce: how the gradients combine over the devices.
    loss_reduce: how the reported loss combines over the devices.

  Returns:
    `(state, loss)`.
  """
  model, bn_state, opt_state = state
  (loss, bn_state), grads = eqx.filter_value_and_grad(
      loss_fn, has_aux=True)(model, bn_state, batch)
  grads = reduce(grads, DEVICES)
  updates, opt_state = optim.update(grads, opt_state,
                                    eqx.filter(model, eqx.is_array))
  model = eqx.apply_updates(model, updates)
  return (model, bn_state, opt_state), loss_reduce(loss, DEVICES)


p_train_step = eqx.filter_pmap(train_step, axis_name=DEVICES,
                               in_axes=(None, 0), out_axes=(None, 0))


def batches(rows: int = ROWS):
  """`step -> {"x", "y"}`: a fixed linear teacher's labels, per-step rows."""
  teacher = np.random.default_rng(1234).normal(size=(FEATURES, CLASSES))

  def batch(i):
    x = np.random.default_rng(i).normal(size=(rows, FEATURES))
    return {"x": x.astype(np.float32),
            "y": np.argmax(x @ teacher, -1).astype(np.int32)}

  return batch


def make_mesh(n=8):
  return Mesh(np.array(jax.devices()[:n]), (DEVICES,))


def make_port_step(mesh, check_vma=False, **wrong):
  """`(state, batch) -> (state, loss)` on `mesh`: the state's arrays go
  through `shard_map`, its other leaves (BatchNorm's axis names and flag)
  are closed over. `check_vma=False`: grad returns each device's own
  gradient, as under pmap (with the default True, BatchNorm's pmean over
  `("batch", "devices")` inside the vmap does not even trace)."""
  step = functools.partial(train_step, **wrong)

  @eqx.filter_jit
  def port_step(state, batch):
    arrays, static = eqx.partition(state, eqx.is_array)

    def body(arrays, batch):
      new, loss = step(eqx.combine(arrays, static), batch)
      return eqx.filter(new, eqx.is_array), loss

    arrays, loss = jax.shard_map(
        body, mesh=mesh, in_specs=(P(), P(DEVICES)), out_specs=(P(), P()),
        check_vma=check_vma)(arrays, batch)
    return eqx.combine(arrays, static), loss

  return port_step


def local_grads(mesh):
  """Wrong: the gradients' pmean dropped, as if `out_specs=P()` averaged
  them: each device steps with its own rows' gradient and the port keeps
  the first device's model and optimiser state."""
  return make_port_step(mesh, reduce=lambda x, _: x)


def local_loss(mesh):
  """Wrong: the loss not averaged (`out_specs=P()` taken to gather it): the
  port reports the first device's loss; the training itself is right."""
  return make_port_step(mesh, loss_reduce=lambda x, _: x)


WRONG = ("local_grads", "local_loss")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port."""
  import compare  # pylint: disable=g-import-not-at-top
  if wrong is not None and wrong not in WRONG:
    raise ValueError(f"wrong: one of {WRONG} or None, got {wrong!r}")
  mesh = make_mesh(8)
  make = make_port_step if wrong is None else globals()[wrong]
  return compare.Port(name="equinox_bn", init=create,
                      pmap_step=p_train_step, port_step=make(mesh),
                      mesh=mesh, batches=batches(), steps=steps)
