"""Per-device loops of different lengths (jax-ml/jax#20968).

- Before (region `uneven-before`): under pmap each device runs its own
  `lax.while_loop` for as many trips as its own data asks.
- After, kept per device (region `uneven-after`): the same body under
  `jax.shard_map` runs per device too, with no collective in the loop.
- After, as one global program (region `uneven-global`): written over the
  global array for plain `jit`, the loop's condition reads every row, so
  every device runs the longest row's trips, and the partitioner puts an
  all-reduce of the condition inside the loop, once a trip.

`tests/test_more_idioms.py` runs the three on 8 devices and reads the trips
and the loop's collectives from the compiled text; `docs/MORE-IDIOMS.md`
shows the regions.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


# region: uneven-helper
def halvings(x):
  """How many halvings bring each of `x`'s values below 1, and the trips
  the loop ran: `(counts, trips)`."""
  def cond(carry):
    value, _, _ = carry
    return jnp.any(value >= 1.0)

  def body(carry):
    value, count, trips = carry
    going = value >= 1.0
    return (jnp.where(going, value / 2.0, value), count + going, trips + 1)

  start = (x, jnp.zeros(x.shape, jnp.int32), jnp.zeros((), jnp.int32))
  _, counts, trips = lax.while_loop(cond, body, start)
  return counts, trips
# endregion


# region: uneven-before
def per_device_pmap(stacked):  # stacked: [devices, rows]
  return jax.pmap(halvings, axis_name="data")(stacked)  # own trips each
# endregion


# region: uneven-after
def per_device_port(mesh, x):  # x: [devices * rows], split over `data`
  def body(rows):
    counts, trips = halvings(rows)
    return counts, trips[None]  # one trip count per device
  # check_vma=False: the carry is per device, as under pmap (or pcast it).
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"),
                               out_specs=(P("data"), P("data")),
                               check_vma=False))(x)
# endregion


# region: uneven-global
def global_jit(mesh, x):  # the same loop over the global array
  return jax.jit(halvings, in_shardings=NamedSharding(mesh, P("data")))(x)
# endregion
