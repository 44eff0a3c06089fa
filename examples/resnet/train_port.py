"""The port of `train_pmap` to jax.sharding: one jit of a shard_map on a mesh.

The step's body is the pmap program's with the axis renamed "batch" ->
"data"; what changes is around it: a `Mesh` instead of pmap's implicit
device axis, `NamedSharding`s instead of `replicate` and the reshape to
`[devices, b, ...]`, and `in_specs`/`out_specs` instead of `in_axes`.
"""

import functools

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from examples.resnet import data
from examples.resnet.model import ResNet
from examples.resnet.state import create_train_state
from examples.resnet.state import evaluate
from examples.resnet.state import loss_and_metrics

model = ResNet(axis_name="data")


def make_mesh(n_devices: int | None = None) -> jax.sharding.Mesh:
  """A 1-D mesh, axis "data", over the first `n_devices` (default all)."""
  devices = jax.devices()[:n_devices]
  # Auto, not make_mesh's default Explicit: like pmap's own mesh, and no
  # sharding-in-types rules to meet outside the shard_map.
  return jax.make_mesh((len(devices),), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,),
                       devices=devices)


def train_step(state, batch):
  """One optimizer step on this device's slice of the global batch."""
  # A dropout mask per step and per device: without the device index every
  # device would drop the same units of its examples.
  dropout_key = jax.random.fold_in(
      jax.random.fold_in(state.key, state.step), jax.lax.axis_index("data"))
  grad_fn = jax.value_and_grad(
      functools.partial(loss_and_metrics, model), has_aux=True)
  (_, (metrics, new_batch_stats)), grads = grad_fn(
      state.params, state.batch_stats, batch, dropout_key)
  # Each device differentiated the mean over its own examples; the mean of
  # those is the gradient of the global mean (equal slices).
  grads = jax.lax.pmean(grads, "data")
  metrics = jax.lax.pmean(metrics, "data")
  state = state.apply_gradients(grads=grads, batch_stats=new_batch_stats)
  return state, metrics


def compile_step(mesh, step_fn):
  """`step_fn` as pmap ran it: per device, state replicated, batch split."""
  # check_vma=False: `grad` then returns each device's own gradient, as
  # under pmap, and train_step's pmean is right. With check_vma=True the
  # gradient of a P() input comes back already summed over "data", and that
  # pmean would leave it n times too large on n devices.
  # out_specs=P() takes one device's copy unchecked: the pmeans make every
  # copy equal, and a mistake that breaks that goes unnoticed.
  sharded = jax.shard_map(step_fn, mesh=mesh, in_specs=(P(), P("data")),
                          out_specs=(P(), P()), check_vma=False)
  return jax.jit(sharded, donate_argnums=0)


def make_port_step(mesh):
  """The compiled `(state, batch) -> (state, metrics)` on `mesh`."""
  return compile_step(mesh, train_step)


def sync_batch_stats(state):
  """A no-op, kept so the port's call sites read like the pmap program's.

  pmap returned one copy of the state per device, and `sync_batch_stats`
  averaged those copies. Here `out_specs=P()` declares the state one value:
  there are no copies to average. They could only have differed if BatchNorm
  had not averaged its batch statistics over "data" (`ResNet(axis_name=
  "data")` does), and then the pmap program's sync would have hidden it.
  The pmap sync is not even bitwise a no-op (the mean of 8 equal floats can
  round), so the port's state matches the pmap one's from before its sync.
  """
  return state


def put_state(state, mesh):
  """A host state replicated over the mesh (pmap: `replicate`)."""
  return jax.device_put(state, NamedSharding(mesh, P()))


def put_batch(batch, mesh):
  """A global host batch split over "data" (pmap: the reshape)."""
  return jax.device_put(batch, NamedSharding(mesh, P("data")))


def train(state, steps: int, mesh=None, step_fn=None):
  """Trains a host state for `steps` steps on a mesh.

  Args:
    state: The initial state, one host copy (`create_train_state`).
    steps: Number of optimizer steps; step `i` reads `data.host_batch(i)`.
    mesh: The mesh, by default `make_mesh()` (all devices).
    step_fn: The compiled step, by default `make_port_step(mesh)`.

  Returns:
    `(state, metrics)`: the final state on the mesh, and the last step's
    metrics (host floats).
  """
  mesh = mesh or make_mesh()
  p_train_step = step_fn or make_port_step(mesh)
  state = put_state(state, mesh)
  metrics = None
  for step in range(steps):
    state, metrics = p_train_step(state, put_batch(data.host_batch(step), mesh))
  state = sync_batch_stats(state)
  return state, jax.tree.map(float, metrics)


def main(steps: int = 30):
  """Trains from seed 0 and prints the test metrics."""
  state, metrics = train(create_train_state(0, steps), steps)
  print(f"last step: {metrics}")
  print(f"test: {evaluate(state)}")


if __name__ == "__main__":
  main()
