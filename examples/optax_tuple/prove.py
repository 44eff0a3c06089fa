"""Proving the optax program's port: all the code a team writes.

`python -m compare --program examples.optax_tuple.prove:port`; `...:lr_port`
proves a wrong port (its updates 1% large), which fails at step 1.
"""

# region: prove-a-tuple-state
import compare
from examples.optax_tuple import train_pmap, train_port

STEPS, ROWS = 20, 256


def port(make_step=train_port.make_step, steps=STEPS):
  """The `(params, opt_state)` program, pmap'd the new way, and its port."""
  mesh = train_port.make_mesh(8)
  x, y = train_pmap.data(ROWS * steps)
  return compare.Port(
      name="optax_tuple", init=train_pmap.init,  # (params, opt_state)
      pmap_step=compare.adapt_step(train_pmap.p_step, state_parts=2),
      port_step=compare.adapt_step(make_step(mesh), state_parts=2),
      mesh=mesh, steps=steps,
      batches=lambda i: {"x": x[i * ROWS:(i + 1) * ROWS],
                         "y": y[i * ROWS:(i + 1) * ROWS]})
# endregion


def lr_port():
  """The port whose updates are 1% too large."""
  return port(train_port.make_wrong_step)
