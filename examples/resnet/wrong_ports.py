"""Two wrong ports of `train_pmap`: each runs, and each trains differently.

Each factory has `make_port_step(mesh)`'s signature and makes ONE mistake
that teams make when porting, on top of `train_port`'s otherwise correct
step. Neither raises: `check_vma=False` and `out_specs=P()` take device 0's
values without checking that the devices agree.
"""

import functools

import jax

from examples.resnet import train_port
from examples.resnet.model import ResNet
from examples.resnet.state import loss_and_metrics


def _step(model, dropout_key, state, batch):
  """`train_port.train_step` after its first statement, for any model/key."""
  grad_fn = jax.value_and_grad(
      functools.partial(loss_and_metrics, model), has_aux=True)
  (_, (metrics, new_batch_stats)), grads = grad_fn(
      state.params, state.batch_stats, batch, dropout_key)
  grads = jax.lax.pmean(grads, "data")
  metrics = jax.lax.pmean(metrics, "data")
  state = state.apply_gradients(grads=grads, batch_stats=new_batch_stats)
  return state, metrics


def make_unsynced_batch_norm_step(mesh):
  """The model built with `axis_name=None`: per-device batch statistics.

  pmap programs often built the model in one place with axis_name="batch";
  the port builds its own and leaves the name out. Nothing fails: BatchNorm
  normalises each device's 8 examples by their own mean and variance, the
  gradients differ, and the state keeps device 0's running averages.
  """
  unsynced = ResNet(axis_name=None)  # MISTAKE: should be axis_name="data".

  def train_step(state, batch):
    dropout_key = jax.random.fold_in(
        jax.random.fold_in(state.key, state.step), jax.lax.axis_index("data"))
    return _step(unsynced, dropout_key, state, batch)

  return train_port.compile_step(mesh, train_step)


def make_same_dropout_key_step(mesh):
  """The dropout key not folded with the device index: one mask for all.

  Under pmap a key in the replicated state is the same on every device too,
  so this is the pmap program's bug as much as the port's; teams that
  dropped `axis_index` when renaming the axis get it here.
  """

  def train_step(state, batch):
    # MISTAKE: no fold_in of jax.lax.axis_index("data").
    dropout_key = jax.random.fold_in(state.key, state.step)
    return _step(train_port.model, dropout_key, state, batch)

  return train_port.compile_step(mesh, train_step)
