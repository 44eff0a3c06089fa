"""A pmap program's checkpoint restored into its port (docs/MIGRATION.md 5.2).

The old program (`pmap_program`) keeps what pmap-era programs kept: a
`TrainState` replicated with `flax.jax_utils.replicate` (a leading device
axis), a raw `jax.random.PRNGKey` (`uint32[2]`) in it, `optax.MultiSteps`
accumulating 4 microbatches; it saves the stacked state with Orbax after 6
calls, mid-accumulation. The port (`port_step`, `restore_in_port`) holds a
typed key and a replicated state on a mesh, and restores that checkpoint
with `compare.from_pmap_checkpoint`. `continue_both` runs both on from the
checkpoint; `tests/test_pmap_checkpoints.py` checks they stay bitwise equal
(XLA:CPU, 8 emulated devices, jax 0.10.2), and `tests/test_trainstate_port.py`
that `restore_in_port` in 2 processes x 4 devices (gloo) restores every
leaf bitwise as one process does.

    python -m docs.pmap_checkpoint   # prints the two runs' last losses
"""

import tempfile

import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import compare


# region: pmap-checkpoint
class State(train_state.TrainState):
  rng: jax.Array  # pmap era: jax.random.PRNGKey, uint32[2]; port: typed


def make_state(rng):
  model = nn.Dense(1)
  tx = optax.MultiSteps(optax.adam(1e-2), every_k_schedule=4)
  params = model.init(jax.random.key(0), jnp.ones((1, 4)))["params"]
  return State.create(apply_fn=model.apply, params=params, tx=tx, rng=rng)


def train_step(state, x, y, axis):  # the same body under pmap and the port
  noise = jax.random.normal(jax.random.fold_in(  # a key per device and step
      jax.random.fold_in(state.rng, state.step), jax.lax.axis_index(axis)),
                            x.shape)
  def loss_fn(params):
    return jnp.mean((state.apply_fn({"params": params}, x + 0.1 * noise)
                     - y) ** 2)
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  grads, loss = jax.lax.pmean((grads, loss), axis)
  return state.apply_gradients(grads=grads), loss


def batch(i, n=8):  # global batch i: [n * 4, 4] rows
  x = np.random.default_rng(i).normal(size=(n * 4, 4)).astype(np.float32)
  return x, x.sum(1, keepdims=True)


def pmap_program(workdir, calls=6):  # the old program: saves mid-accumulation
  step = jax.pmap(lambda s, x, y: train_step(s, x, y, "batch"), "batch")
  state = flax.jax_utils.replicate(make_state(jax.random.PRNGKey(1)))
  for i in range(calls):
    x, y = (a.reshape(8, -1, a.shape[-1]) for a in batch(i))
    state, _ = step(state, x, y)
  with ocp.StandardCheckpointer() as checkpointer:  # waits for the write
    checkpointer.save(workdir, jax.device_get(state))
  return state


def port_step(mesh):
  return jax.jit(jax.shard_map(
      lambda s, x, y: train_step(s, x, y, "data"), mesh=mesh,
      in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()),
      check_vma=False))


def restore_in_port(workdir, mesh):  # the port's own state, then the saved
  # A typed key is placed as its data: on many processes device_put
  # refuses a key array (it lives on one device) but spreads its data.
  like = make_state(jax.random.key(1))
  like = jax.device_put(like.replace(rng=jax.random.key_data(like.rng)),
                        NamedSharding(mesh, P()))
  like = like.replace(rng=jax.random.wrap_key_data(like.rng))
  with ocp.StandardCheckpointer() as checkpointer:
    raw = checkpointer.restore(workdir)  # no target: as saved, [8, ...]
  return compare.from_pmap_checkpoint(raw, like)
# endregion


def continue_both(pmap_state, port_state, mesh, start=6, calls=3):
  """Both programs on from the checkpoint: (pmap's losses, the port's)."""
  p_step = jax.pmap(lambda s, x, y: train_step(s, x, y, "batch"), "batch")
  step, losses = port_step(mesh), ([], [])
  for i in range(start, start + calls):
    x, y = batch(i)
    pmap_state, loss = p_step(pmap_state, *(a.reshape(8, -1, a.shape[-1])
                                            for a in (x, y)))
    losses[0].append(np.asarray(loss)[0])
    port_state, loss = step(port_state, x, y)
    losses[1].append(np.asarray(loss))
  return pmap_state, port_state, losses


def main():
  mesh = jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  with tempfile.TemporaryDirectory() as workdir:
    old = pmap_program(workdir + "/ckpt")
    new = restore_in_port(workdir + "/ckpt", mesh)
  print(continue_both(old, new, mesh)[2])


if __name__ == "__main__":
  main()
