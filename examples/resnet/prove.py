"""Proving the port: the code a team writes to plug its program into compare.

`python -m compare --program examples.resnet.prove:port` proves the port;
`...:unsynced_batch_norm` and `...:same_dropout_key` prove the two wrong
ports of `wrong_ports`, which must fail at step 1. `tests/test_prove.py`
runs all three through `compare.testing`, the pytest helper. The region is
all the code a team writes to plug its program in.
"""

# region: prove-your-port
import jax

import compare
from examples.resnet import data, train_pmap, train_port
from examples.resnet.state import create_train_state, evaluate

STEPS = 30


def reference_step(n_devices):
  """pmap's step on one device: vmap names the axis, the batch is split."""
  per_device = jax.vmap(train_pmap.train_step, in_axes=(None, 0),
                        axis_name="batch")
  def step(state, batch):
    state, metrics = per_device(state, compare.split_batch(batch, n_devices))
    return jax.tree.map(lambda x: x[0], (state, metrics))
  return jax.jit(step)


def port(make_port_step=train_port.make_port_step, steps=STEPS):
  """The program and its port, described once."""
  mesh = train_port.make_mesh(8)
  return compare.Port(
      name="resnet", init=lambda: create_train_state(0, steps),
      pmap_step=train_pmap.p_train_step, port_step=make_port_step(mesh),
      mesh=mesh, batches=data.host_batch, steps=steps,
      reference_step=reference_step(mesh.size), evaluate=evaluate)
# endregion

from examples.resnet import wrong_ports  # pylint: disable=g-import-not-at-top,wrong-import-position


def unsynced_batch_norm():
  """The port whose BatchNorm does not average over devices."""
  return port(wrong_ports.make_unsynced_batch_norm_step)


def same_dropout_key():
  """The port where every device draws the same dropout mask."""
  return port(wrong_ports.make_same_dropout_key_step)
