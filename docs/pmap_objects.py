"""Code that inspects a pmap'd function: `.lower()` and `__wrapped__`.

- Before (region `objects-before`): tools that read a pmap'd function's
  compiled text (`pmapped.lower(stacked).compile().as_text()`) or the
  function inside it (`pmapped.__wrapped__`). Both still work on jax 0.10.2
  (docs/jax-facts.md).
- After (region `objects-after`): the same on `jax.jit(jax.shard_map(...))`.
  `__wrapped__` leads through jit to the shard_map and from it to the
  function, one level more. `.lower()` takes the global shapes with their
  shardings (`jax.ShapeDtypeStruct`), no data: on many hosts pmap lowered
  this process's host-local arrays, and the port lowers the global view
  that every process shares.

`tests/test_more_idioms.py` runs both on 8 devices; `docs/MORE-IDIOMS.md`
shows the regions.
"""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


# region: objects-helper
def step(x):
  """Each device's rows doubled, summed over the devices."""
  return jax.lax.psum(x * 2.0, "data")
# endregion


# region: objects-before
def inspect_pmap(stacked):
  """The pmap'd step's compiled text and the function it wraps."""
  pmapped = jax.pmap(step, axis_name="data")
  text = pmapped.lower(stacked).compile().as_text()  # host-local arrays
  return text, pmapped.__wrapped__
# endregion


# region: objects-after
def inspect_port(mesh, global_shape, dtype=jnp.float32):
  """The port's compiled text, from shapes alone, and the function."""
  port = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("data"),
                               out_specs=P("data")))
  spec = jax.ShapeDtypeStruct(global_shape, dtype,
                              sharding=NamedSharding(mesh, P("data")))
  text = port.lower(spec).compile().as_text()  # global shapes, no data
  return text, port.__wrapped__.__wrapped__  # jit -> shard_map -> step
# endregion
