"""The guide's quick path: one flax TrainState step under pmap, then ported.

Two regions, each a whole program a reader can paste into a file and run
(on 8 devices): `quick-before` is the step as a pmap program has it,
`quick-after` the same step under `jax.jit(jax.shard_map(...))` on a mesh.
`docs/MIGRATION.md` shows both; `tests/test_quick_path.py` runs each region's
text as it stands and checks that the two end on bitwise the same loss and
params, and measures what `check_vma=True` does to the gradients. The
port's mesh and batch placement are `docs/many_hosts_main.py`'s calls, which
`tests/test_many_hosts.py` runs in two processes (and checks the text of).
Each region is top-level code, so this module is a script: importing it
runs both programs, one after the other (a few seconds).
`python -m docs.quick_path` runs them on 8 emulated CPU devices and prints
their final losses.
"""
# Each region imports what it uses, so that it can be copied alone.
# pylint: disable=reimported,g-import-not-at-top,wrong-import-position
# pylint: disable=ungrouped-imports,g-bad-import-order,redefined-outer-name
# pylint: disable=function-redefined,missing-function-docstring

import os

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")


# region: quick-before
# Needs 8 devices, e.g. XLA_FLAGS=--xla_force_host_platform_device_count=8
import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax import lax


def train_step(state, batch):
  def loss_fn(params):
    pred = state.apply_fn({"params": params}, batch["x"])
    return jnp.mean((pred - batch["y"]) ** 2)
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  # Each device saw only its shard: average, so every replica steps alike.
  grads = lax.pmean(grads, "batch")
  loss = lax.pmean(loss, "batch")
  return state.apply_gradients(grads=grads), loss


model = nn.Sequential([nn.Dense(16), nn.relu, nn.Dense(1)])
params = model.init(jax.random.key(0), jnp.ones((1, 4)))["params"]
state = train_state.TrainState.create(
    apply_fn=model.apply, params=params, tx=optax.sgd(0.1, momentum=0.9))
p_train_step = jax.pmap(train_step, axis_name="batch")
state = flax.jax_utils.replicate(state)  # a copy per device: [n, ...]

rng = np.random.default_rng(0)  # synthetic host data: y = x @ w
w = rng.normal(size=(4, 1)).astype(np.float32)
for _ in range(5):
  x = rng.normal(size=(64, 4)).astype(np.float32)
  batch = {"x": x, "y": x @ w}
  # pmap maps over the leading axis: one slice per local device.
  batch = jax.tree.map(
      lambda a: a.reshape(jax.local_device_count(), -1, *a.shape[1:]), batch)
  state, loss = p_train_step(state, batch)
print(f"final loss: {loss[0]:.6f}")  # one copy per device; all equal
# endregion

_BEFORE_LOSS = loss[0]  # the next region rebinds `loss`


# region: quick-after
# Needs 8 devices, e.g. XLA_FLAGS=--xla_force_host_platform_device_count=8
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P


def train_step(state, batch):  # pmap's body, its axis now the mesh's
  def loss_fn(params):
    pred = state.apply_fn({"params": params}, batch["x"])
    return jnp.mean((pred - batch["y"]) ** 2)
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  # Each device saw only its shard: average, so every replica steps alike.
  grads = lax.pmean(grads, "data")
  loss = lax.pmean(loss, "data")
  return state.apply_gradients(grads=grads), loss


# Auto: make_mesh's Explicit default refuses indexing and reshapes pmap does
mesh = jax.make_mesh((jax.device_count(),), ("data",),
                     axis_types=(jax.sharding.AxisType.Auto,))
model = nn.Sequential([nn.Dense(16), nn.relu, nn.Dense(1)])
params = model.init(jax.random.key(0), jnp.ones((1, 4)))["params"]
state = train_state.TrainState.create(
    apply_fn=model.apply, params=params, tx=optax.sgd(0.1, momentum=0.9))
# check_vma=False is pmap's semantics (bitwise on XLA:CPU, jax 0.10.2). Under
# True a P() input's gradient comes back summed over "data": N times pmap's,
# pmean or not (the gradient trap, docs/traps.py). True: pmean the loss.
p_train_step = jax.jit(jax.shard_map(
    train_step, mesh=mesh, in_specs=(P(), P("data")),
    out_specs=(P(), P()), check_vma=False), donate_argnums=0)
replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
state = jax.device_put(state, replicated)  # one copy; same on every host
rng = np.random.default_rng(0)  # synthetic host data: y = x @ w
w = rng.normal(size=(4, 1)).astype(np.float32)
for _ in range(5):
  x = rng.normal(size=(64, 4)).astype(np.float32)
  batch = jax.tree.map(lambda a: jax.make_array_from_process_local_data(
      split, a), {"x": x, "y": x @ w})  # a host's rows, in place of reshape
  state, loss = p_train_step(state, batch)
print(f"final loss: {loss:.6f}")
# endregion


def main():
  """Prints each region's final loss; the regions ran when this was
  imported."""
  print(f"quick-before (pmap):      {float(_BEFORE_LOSS)!r}")
  print(f"quick-after (shard_map):  {float(loss)!r}")
  print(f"bitwise equal: {bool(_BEFORE_LOSS == loss)}")


if __name__ == "__main__":
  main()
