"""Proving the tutorial's port: all the code a team writes to plug it in.

`python -m compare --program examples.linear_regression.prove:port` proves
it; `...:psum_port` proves a wrong port, which fails at step 1.
`tests/test_examples.py` runs both through the public API only.
"""

# region: prove-the-tutorial
import jax

import compare
from examples.linear_regression import train_pmap, train_port

STEPS, ROWS = 20, 128


def port(make_update=train_port.make_update, steps=STEPS):
  """The tutorial's program and its port, as they are written."""
  mesh = train_port.make_mesh(8)
  xs, ys = train_pmap.data(ROWS * steps)
  return compare.Port(
      name="linear_regression",
      init=lambda: train_pmap.init(jax.random.key(123)),  # a Params tuple
      pmap_step=compare.adapt_step(train_pmap.update, batch_keys=("xs", "ys")),
      port_step=compare.adapt_step(make_update(mesh), batch_keys=("xs", "ys")),
      mesh=mesh, steps=steps,
      batches=lambda i: {"xs": xs[i * ROWS:(i + 1) * ROWS],
                         "ys": ys[i * ROWS:(i + 1) * ROWS]})
# endregion


def psum_port():
  """The port that sums the gradients where the program averages them."""
  return port(train_port.make_wrong_update)
