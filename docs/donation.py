"""Donated inputs placed in another sharding than the step's output.

- Wrong (region `donate-wrong`): a state placed replicated (`P()`) donated
  to a step whose new state is split over `data` (an fsdp step fed a
  data-parallel state): no output can reuse its buffers, jax warns "Some
  donated buffers were not usable", and the old state stays alive beside
  the new one: twice the memory where donation was meant to save it.
- Right (region `donate-right`): place the state in the sharding the step
  returns, once, before the first step; each step then reuses it.

`tests/test_more_idioms.py` runs both on 8 devices and checks which input
was consumed; `docs/MORE-IDIOMS.md` shows the regions.
"""

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


# region: donate-helper
def make_step(mesh):
  """A step that returns its state split over `data`, donating it."""
  rows = NamedSharding(mesh, P("data"))
  return jax.jit(lambda state: state * 0.5, out_shardings=rows,
                 donate_argnums=0)
# endregion


# region: donate-wrong
def donate_replicated(mesh, host_state):
  state = jax.device_put(host_state, NamedSharding(mesh, P()))
  new_state = make_step(mesh)(state)  # warns; `state` stays alive too
  return state, new_state
# endregion


# region: donate-right
def donate_in_place(mesh, host_state):
  state = jax.device_put(host_state, NamedSharding(mesh, P("data")))
  new_state = make_step(mesh)(state)  # reuses `state`'s buffers
  return state, new_state
# endregion


def host_state(rows=16, columns=4):
  """A small float32 state whose rows split over 8 devices."""
  return np.ones((rows, columns), np.float32)
