"""The written step on the Port's layout: what `--prove` runs and counts.

What comes in: the written step (the file's own object), the axes its
writer recorded for it (`records.Port`: pmap's axes of each argument and
output, 0 stacked, None one value) and the Port's mesh. What goes out: a
step `(state, batch) -> (state, metrics)` on the Port's layout (one state,
the global batch), with `lower_each` lowering the written step alone, as
`compare.prove` counts it.

- `on_mesh`: the first step, which keeps pmap's stacked layout;
- `on_global_mesh`: a `--global` port, stacked only where its writer kept
  pmap's view;
- `with_layout`: the first step on pmap's layout of the state the Port's
  check accepts (stacked, or broadcast);
- `with_bound_keywords`: a local pmap's step whose lambda takes keyword
  arguments after `(state, batch)`, each given the Port's bound value.
"""

import dataclasses
import functools

from compare._src.prove import port as port_module
from compare._src.prove import port_steps


def on_mesh(stacked_step, n_devices: int, broadcast: bool):
  """`stacked_step` (pmap's layout) as a step on the Port's layout."""
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,import-outside-toplevel

  def step(state, batch):
    split = jax.tree.map(
        lambda x: x.reshape((n_devices, -1) + x.shape[1:]), batch)
    if not broadcast:
      state = jax.tree.map(
          lambda x: jnp.broadcast_to(x, (n_devices,) + x.shape), state)
    state, metrics = stacked_step(state, split)
    if not broadcast:
      state = jax.tree.map(lambda x: x[0], state)
    # pmap's per-device metrics, averaged as the harness averages pmap's.
    return state, jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)

  adapted = jax.jit(step)
  written = getattr(stacked_step, "jitted", None)  # the file's own jit
  if written is None:
    return adapted

  def lower_each(state, batch):
    """The written step alone, lowered on the layout it is handed: what the
    report counts is the port's collectives and bytes, not the adapter's
    (a stack and an `x[0]` per leaf)."""
    def stacked(x, split):
      shape = ((n_devices, x.shape[0] // n_devices) + x.shape[1:] if split
               else (n_devices,) + x.shape)
      return jax.ShapeDtypeStruct(shape, x.dtype)
    args = (state if broadcast else jax.tree.map(
        lambda x: stacked(x, False), state),
            jax.tree.map(lambda x: stacked(x, True), batch))
    return [written().lower(*args)]

  run = functools.partial(adapted)  # a jit takes no attribute; a partial does
  run.lower_each = lower_each  # the engine compiles it to count, never runs
  return run



def on_global_mesh(global_step, axes: dict, size: int, mesh=None):
  """A `--global` port as a step on the Port's layout (one state placed
  with P(), the global batch): what the written port still takes in pmap's
  stacked layout (`in_axes` 0: a batch the program stacks itself) is
  stacked for it, and what it gives back per device (`out_axes` 0) is
  taken from device 0 (the state) or averaged as the harness averages
  pmap's metrics (the metrics). Given `mesh` (the Port's), it traces with
  its devices as jax's mesh: a file that joins `jax.distributed` sets its
  mesh after the join, which importing it does not run, and its shard_map
  names none."""
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  state_in, batch_in = axes["in_axes"]
  state_out, metrics_out = axes["out_axes"]
  n_devices = size
  # The program's own mesh is `Mesh(devices, axes)`: its axes Auto.
  traced = mesh and jax.sharding.Mesh(mesh.devices,
                                      mesh.axis_names).abstract_mesh

  def handed(state, batch, call=global_step):
    """The written step (`call`: it, or what reads it) on the layout the
    adapter hands it."""
    if state_in == 0:
      state = jax.tree.map(
          lambda x: jnp.broadcast_to(x, (n_devices,) + x.shape), state)
    if batch_in == 0:
      batch = jax.tree.map(
          lambda x: x.reshape((n_devices, -1) + x.shape[1:]), batch)
    if traced is None:
      return call(state, batch)
    with jax.sharding.use_abstract_mesh(traced):
      return call(state, batch)

  def step(state, batch):
    state, metrics = handed(state, batch)
    if state_out == 0:
      state = jax.tree.map(lambda x: x[0], state)
    if metrics_out == 0:
      metrics = jax.tree.map(lambda x: jnp.mean(x, axis=0), metrics)
    return state, metrics

  # One program (the harness times a step, not Python around one), which
  # donates the state where the written step does (at any depth: a jit in a
  # jit donates nothing, and the proof held each step's old state beside
  # its new: flax nlp_seq at its default size peaked 18.7 GB, 14.6 with).
  adapted = []

  def run(state, batch):
    if not adapted:
      donated = state_in is None and _donates(
          jax.make_jaxpr(handed)(state, batch).jaxpr)
      adapted.append(jax.jit(step, donate_argnums=(0,) if donated else ()))
    return adapted[0](state, batch)

  # What the report counts: the written step's collectives and bytes, not
  # the adapter's averaging of per-device metrics (an all-reduce each:
  # flax lm1b's port read 4 where pmap's step runs 1).
  run.lower_each = lambda state, batch: [jax.jit(handed).lower(state,
                                                               batch)]
  return run


def _donates(jaxpr) -> bool:
  """Whether a jit called in `jaxpr`, at any depth, donates an argument."""
  return any(any(eqn.params.get("donated_invars", ())) or any(
      hasattr(j, "eqns") and _donates(j)
      for j in (getattr(v, "jaxpr", v) for v in eqn.params.values()))
             for eqn in jaxpr.eqns)


def with_layout(port, rewritten):
  """The Port with the rewritten step as its port, on pmap's layout of the
  state (stacked, or broadcast: the one `compare.prove`'s check accepts)."""
  first = None
  for broadcast in (False, True):
    proved = dataclasses.replace(port, port_step=on_mesh(
        rewritten, port.mesh.size, broadcast))
    try:
      checked = port_module.check(proved)
    except port_module.PortError as err:
      first = first or err
      continue
    if (checked.pmap_layout == port_steps.BROADCAST) == broadcast:
      return proved
  raise first



def with_bound_keywords(step, names: tuple, fun, n_devices: int):
  """The written step of a local pmap as the Port calls it, `(state,
  batch)`, where its lambda takes `names` after them (the keyword
  arguments of the program's calls, `records.Port.after_two`): each given
  the value the Port's function binds (`functools.partial(f, ..., k=v)`),
  on every device as pmap broadcast it. `step` itself where it takes
  none."""
  import jax  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  if not names:
    return step
  bound = fun.keywords if isinstance(fun, functools.partial) else {}
  missing = [k for k in names if k not in bound]
  if missing:
    raise port_module.PortError(
        f"--prove: the written step takes {', '.join(missing)} (keyword "
        "arguments of the program's calls); the Port's pmap_step must bind "
        "them (functools.partial(f, ..., k=v)) to be proved against it")
  stacked = [jax.tree.map(
      lambda x: jnp.broadcast_to(x, (n_devices, *jnp.shape(x))), bound[k])
             for k in names]
  return jax.jit(lambda state, batch: step(state, batch, *stacked))
