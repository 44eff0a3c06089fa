"""A Flax NNX team program: Linear (with a bias) -> BatchNorm -> relu ->
Dropout -> Linear, trained by an `nnx.Optimizer` with AdamW on warm-up and
cosine decay.

The pmap program uses NNX's functional API: `nnx.split` of the model and its
optimiser gives a graphdef (closed over) and an `nnx.State`, which `jax.pmap`
takes as a copy per device (`in_axes=0`); the step merges, updates and
splits again. BatchNorm averages its statistics over `axis_name`; dropout's
key is the step's key folded with the device's index, so every device draws
its own mask and a port can draw the same ones.

The port runs the same step under `jax.jit(jax.shard_map(...))`, the state
replicated, the batch split by rows (`check_vma=False`: `nnx.grad` returns
each device's own gradient, as under pmap).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, PartitionSpec as P

FEATURES, HIDDEN, CLASSES, ROWS = 16, 32, 4, 64
AXIS = "batch"
DROPOUT_SEED = 42


class MLP(nnx.Module):
  """Linear -> BatchNorm -> relu -> Dropout -> Linear."""

  def __init__(self, rngs: nnx.Rngs, axis_name: str | None = AXIS):
    self.linear1 = nnx.Linear(FEATURES, HIDDEN, use_bias=True, rngs=rngs)
    self.bn = nnx.BatchNorm(HIDDEN, momentum=0.9, axis_name=axis_name,
                            rngs=rngs)
    self.dropout = nnx.Dropout(0.2)
    self.linear2 = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

  def __call__(self, x, rngs=None):
    x = nnx.relu(self.bn(self.linear1(x)))
    return self.linear2(self.dropout(x, rngs=rngs))


def create(steps: int = 10, seed: int = 0, axis_name: str | None = AXIS):
  """`(graphdef, state)` of the model and its optimiser (`nnx.split`).

  Args:
    steps: the schedule's length.
    seed: the parameters' seed.
    axis_name: BatchNorm's axis (None: each device's own statistics).
  """
  model = MLP(nnx.Rngs(seed), axis_name=axis_name)
  schedule = optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=3e-3, warmup_steps=max(1, steps // 5),
      decay_steps=steps)
  optimizer = nnx.Optimizer(model, optax.adamw(schedule, weight_decay=1e-2),
                            wrt=nnx.Param)
  return nnx.split((model, optimizer))


def train_step(graphdef, state, batch, per_device_dropout=True):
  """One step on the split state, under an axis named `AXIS`.

  Args:
    graphdef: the static half of `nnx.split`.
    state: the `nnx.State` of the model and its optimiser.
    batch: this device's rows, `{"x": [rows, FEATURES], "y": [rows]}`.
    per_device_dropout: fold the device's index into dropout's key (False:
      every device draws the same mask).

  Returns:
    `(state, metrics)`, the loss and accuracy averaged over the devices.
  """
  model, optimizer = nnx.merge(graphdef, state)
  key = jax.random.fold_in(jax.random.key(DROPOUT_SEED),
                           optimizer.step[...])
  if per_device_dropout:
    key = jax.random.fold_in(key, jax.lax.axis_index(AXIS))

  def loss_fn(model):
    logits = model(batch["x"], rngs=key)
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()
    return loss, logits

  (loss, logits), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
  grads = jax.lax.pmean(grads, AXIS)
  optimizer.update(model, grads)
  accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
  metrics = {"loss": jax.lax.pmean(loss, AXIS),
             "accuracy": jax.lax.pmean(accuracy, AXIS)}
  return nnx.split((model, optimizer))[1], metrics


def make_pmap_step(graphdef):
  """The classic program: the state a copy per device."""
  return jax.pmap(functools.partial(train_step, graphdef), axis_name=AXIS)


def batches(rows: int = ROWS):
  """`step -> {"x", "y"}`: a fixed linear teacher's labels, per-step rows."""
  teacher = np.random.default_rng(1234).normal(size=(FEATURES, CLASSES))

  def batch(i):
    x = np.random.default_rng(i).normal(size=(rows, FEATURES))
    return {"x": x.astype(np.float32),
            "y": np.argmax(x @ teacher, -1).astype(np.int32)}

  return batch


def make_mesh(n=8):
  return Mesh(np.array(jax.devices()[:n]), (AXIS,))


def make_port_step(mesh, graphdef, **wrong):
  # check_vma=False: grad returns each device's own gradient, as under
  # pmap, so train_step's pmean is right.
  body = functools.partial(train_step, graphdef, **wrong)
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P(AXIS)),
                               out_specs=(P(), P()), check_vma=False))


def local_bn(mesh, steps):
  """Wrong: the port's model built without BatchNorm's `axis_name`, as a
  `jit` program over global arrays writes it; under shard_map each device
  normalises by its own 8 rows and keeps its own running statistics (the
  first device's returned)."""
  graphdef, _ = create(steps, axis_name=None)
  return make_port_step(mesh, graphdef)


def same_dropout_key(mesh, steps):
  """Wrong: dropout's key not folded with the device's index (the port
  thought of the key as global): every device drops the same units."""
  graphdef, _ = create(steps)
  return make_port_step(mesh, graphdef, per_device_dropout=False)


def correct(mesh, steps):
  graphdef, _ = create(steps)
  return make_port_step(mesh, graphdef)


WRONG = ("local_bn", "same_dropout_key")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port."""
  import compare  # pylint: disable=g-import-not-at-top
  if wrong is not None and wrong not in WRONG:
    raise ValueError(f"wrong: one of {WRONG} or None, got {wrong!r}")
  mesh = make_mesh(8)
  graphdef, _ = create(steps)
  make = correct if wrong is None else globals()[wrong]
  return compare.Port(
      name="nnx_bn_dropout", init=lambda: create(steps)[1],
      pmap_step=make_pmap_step(graphdef), port_step=make(mesh, steps),
      mesh=mesh, batches=batches(), steps=steps)
