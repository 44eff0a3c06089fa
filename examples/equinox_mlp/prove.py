"""Proving the equinox program's port: all the code a team writes.

`python -m compare --program examples.equinox_mlp.prove:port` (equinox is a
test extra); `...:wrong_port` proves a port whose gradients are 1% large,
which fails at step 1.
"""

# region: prove-an-equinox-program
import compare
from examples.equinox_mlp import train_pmap, train_port

STEPS, ROWS = 20, 256


def port(make_step=train_port.make_step, steps=STEPS):
  """The model's arrays and optax's state, `eqx.filter_pmap`'d, and the
  port."""
  mesh = train_port.make_mesh(8)
  x, y = train_pmap.data(ROWS * steps)
  return compare.Port(
      name="equinox_mlp", init=lambda: train_pmap.split()[1],
      pmap_step=train_pmap.p_step, port_step=make_step(mesh),
      mesh=mesh, steps=steps,
      batches=lambda i: {"x": x[i * ROWS:(i + 1) * ROWS],
                         "y": y[i * ROWS:(i + 1) * ROWS]})
# endregion


def wrong_port():
  """The port whose gradients are 1% large."""
  return port(train_port.make_wrong_step)
