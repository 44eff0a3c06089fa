"""A flax Linen team program: a convolution with a bias before BatchNorm,
Adam with warm-up and cosine decay, optionally under optax.MultiSteps, the
state donated (`donate_argnums=(0,)`, as flax's examples write it).

The convolution's bias has no true gradient (BatchNorm takes the mean out),
so Adam's update of it is normalised rounding noise: the leaf the one-step
band cannot judge.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import jax_utils
from flax.training import train_state
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


class CNN(nn.Module):

  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.Conv(16, (3, 3), use_bias=True)(x)
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                     axis_name="batch" if train else None)(x)
    x = nn.relu(x)
    x = x.mean(axis=(1, 2))
    return nn.Dense(10)(x)


class TrainState(train_state.TrainState):
  batch_stats: dict


def create_state(multi_steps: int = 0, seed: int = 0, steps: int = 40):
  model = CNN()
  variables = model.init(jax.random.PRNGKey(seed), jnp.ones((1, 8, 8, 1)),
                         train=False)
  schedule = optax.warmup_cosine_decay_schedule(0.0, 3e-3, 5, steps)
  tx = optax.adam(schedule)
  if multi_steps:
    tx = optax.MultiSteps(tx, every_k_schedule=multi_steps)
  return TrainState.create(apply_fn=model.apply, params=variables["params"],
                           batch_stats=variables["batch_stats"], tx=tx)


def batches(rows: int = 64):
  rng = np.random.default_rng(0)
  def batch(i):
    r = np.random.default_rng(i)
    return {"image": r.normal(size=(rows, 8, 8, 1)).astype(np.float32),
            "label": r.integers(0, 10, size=(rows,)).astype(np.int32)}
  del rng
  return batch


def train_step(state, batch, axis_name="batch", reduce=jax.lax.pmean,
               stats_reduce=jax.lax.pmean):
  def loss_fn(params):
    logits, updates = state.apply_fn(
        {"params": params, "batch_stats": state.batch_stats},
        batch["image"], train=True, mutable=["batch_stats"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["label"]).mean()
    return loss, (logits, updates)
  (loss, (logits, updates)), grads = jax.value_and_grad(
      loss_fn, has_aux=True)(state.params)
  grads = reduce(grads, axis_name)
  state = state.apply_gradients(grads=grads)
  state = state.replace(batch_stats=stats_reduce(updates["batch_stats"],
                                                 axis_name))
  metrics = {"loss": loss,
             "accuracy": jnp.mean(jnp.argmax(logits, -1) == batch["label"]),
             "grad_norm": optax.global_norm(grads)}
  return state, jax.lax.pmean(metrics, axis_name)


p_train_step = jax.pmap(train_step, axis_name="batch", donate_argnums=(0,))


def make_mesh(n=8):
  return Mesh(np.array(jax.devices()[:n]), ("batch",))


def make_port_step(mesh, check_vma=False, **wrong):
  # check_vma=False: grad returns each device's own gradient, as under
  # pmap, so train_step's pmean is right.
  body = functools.partial(train_step, **wrong)
  return jax.jit(jax.shard_map(body, mesh=mesh,
                               in_specs=(P(), P("batch")),
                               out_specs=(P(), P()), check_vma=check_vma),
                 donate_argnums=(0,))


def default_vma(mesh):
  """Wrong: shard_map's default check_vma=True, whose grad already sums the
  replicated parameters' gradient over the mesh: the pmean leaves it 8x
  large. Adam's update is nearly scale-free, so only its moments show it."""
  return make_port_step(mesh, check_vma=True)


def psum_grads(mesh):
  """Wrong: gradients summed, not averaged."""
  return make_port_step(mesh, reduce=jax.lax.psum)


def local_stats(mesh):
  """Wrong: BatchNorm statistics left per device (the first device's
  kept), not averaged."""
  return make_port_step(mesh, stats_reduce=lambda x, _: x)
