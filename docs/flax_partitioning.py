"""Flax's own FSDP route: `nn.with_partitioning` and logical axis rules.

The model names each parameter's axes ("embed", "out"); rules map those
names to the mesh's axes; `nn.logical_to_mesh_sharding` turns the state's
logical specs into `NamedSharding`s, and `jax.jit` with those shardings
in and out places the state and lets the compiler write the collectives
(region `flax-fsdp`, shown in docs/BEYOND-ONE-AXIS.md#flax-fsdp).

The model is shardport's `linear512` (`shardport.workloads.linear512`: one
dense layer, 512 inputs, squared error summed, Adam), initialised from the
same key, so that `tests/test_flax_partitioning.py` can run it against the
fsdp strategy's shard_map port (`sharded.fsdp`) on the same batches: the
same split of every leaf, the same losses and parameters to rounding.
"""

import jax
import numpy as np
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

# The region imports what the page's imports (docs/page_imports.py, region
# beyond-imports) lack, so that it runs pasted after them.
# region: flax-fsdp
import flax.linen as nn
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.sharding import NamedSharding

class Linear(nn.Module):  # every parameter's axes named
  @nn.compact
  def __call__(self, x):
    return nn.Dense(1, kernel_init=nn.with_partitioning(
        nn.initializers.lecun_normal(), ("embed", "out")),
                    bias_init=nn.with_partitioning(
                        nn.initializers.zeros_init(), ("out",)))(x)

RULES = (("embed", "data"), ("out", None))  # logical axis -> mesh axis

def sharded_state(mesh, key, features=512, learning_rate=0.002):
  """The train state created on the mesh, each leaf split by RULES (Adam's
  moments too: optax keeps the params' boxes), and its shardings."""
  def create(key):
    params = Linear().init(key, jnp.zeros((1, features)))["params"]
    return train_state.TrainState.create(
        apply_fn=Linear().apply, params=params, tx=optax.adam(learning_rate))
  specs = nn.get_partition_spec(jax.eval_shape(create, key))
  shardings = nn.logical_to_mesh_sharding(specs, mesh, RULES)
  return jax.jit(create, out_shardings=shardings)(key), shardings

def make_step(mesh, shardings):
  """The step on global arrays: the loss of the whole batch; jit writes
  the gathers and reduce-scatters the shardings need."""
  n = mesh.shape["data"]
  def step(state, batch):
    def loss_fn(params):  # linear512's: summed, over N (pmap's normalisation)
      out = state.apply_fn({"params": params}, batch["inputs"])
      return jnp.sum((out - batch["targets"]) ** 2) / n
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss
  rows, one = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  return jax.jit(step, in_shardings=(shardings, rows),
                 out_shardings=(shardings, one), donate_argnums=0)
# endregion


def mesh_of(n_devices=8):
  """An Auto mesh, axis "data", over the first `n_devices` devices."""
  return jax.make_mesh((n_devices,), ("data",),
                       axis_types=(AxisType.Auto,),
                       devices=jax.devices()[:n_devices])


def train(batches, seed=0, n_devices=8, learning_rate=0.002):
  """Flax's route from `jax.random.key(seed)`: `(state, losses)` after one
  step per batch (host batches `{"inputs", "targets"}`)."""
  mesh = mesh_of(n_devices)
  state, shardings = sharded_state(mesh, jax.random.key(seed),
                                   learning_rate=learning_rate)
  step, losses = make_step(mesh, shardings), []
  for batch in batches:
    state, loss = step(state, jax.device_put(
        batch, NamedSharding(mesh, P("data"))))
    losses.append(np.asarray(loss))
  return state, losses

