"""What the global step moved: the first step's port and the global one,
compiled on the Port's own state and first batch, side by side.

`python -m compare.rewrite ... --global --prove SPEC` prints it after the
proof: per device, the bytes of the arguments, outputs and temporaries
(`compare._src.measure.hlo.memory`), and the collectives one call runs with the bytes
they move (`compare._src.measure.hlo.describe`), as the harness measures its own steps.
"""

import jax
import numpy as np

from compare._src.measure import hlo
from compare._src.prove import port as port_module



def _size(n: int) -> str:
  """Bytes, in the unit that shows them."""
  for unit, scale in (("MiB", 2 ** 20), ("KiB", 2 ** 10)):
    if n >= scale:
      return f"{n / scale:.2f} {unit}"
  return f"{n} B"


def _inputs(port, axes: dict):
  """The Port's initial state and first batch in the layout the written
  port takes (`in_axes` 0: pmap's stacked `[devices, ...]`)."""
  n = port.mesh.size
  state = port.init() if callable(port.init) else port.init
  batch = port_module.Batches(port.batches)(0)
  state_in, batch_in = axes["in_axes"]
  if state_in == 0:
    state = jax.tree.map(
        lambda x: np.broadcast_to(np.asarray(x), (n,) + np.shape(x)), state)
  if batch_in == 0:
    batch = jax.tree.map(
        lambda x: np.asarray(x).reshape((n, -1) + np.shape(x)[1:]), batch)
  return state, batch


def describe(port, written_step, axes: dict, mesh=None) -> dict:
  """`hlo.describe` of a written port (its jit, under the file's
  `_pmap_call`), compiled on the Port's state and first batch; with
  `mesh`'s devices as jax's mesh where given (a step naming none)."""
  jitted = (written_step.jitted() if hasattr(written_step, "jitted")
            else written_step)
  if mesh is None:
    compiled = jitted.lower(*_inputs(port, axes)).compile()
  else:  # the program's own mesh: its axes Auto
    with jax.set_mesh(jax.sharding.Mesh(mesh.devices, mesh.axis_names)):
      compiled = jitted.lower(*_inputs(port, axes)).compile()
  return hlo.describe(compiled)


def lines(first: dict, global_: dict) -> list[str]:
  """The report: each figure of the first step's port beside the global
  one's, per device."""
  rows = []
  for key, label in (("argument_bytes", "arguments"),
                     ("output_bytes", "outputs"),
                     ("temp_bytes", "temporaries"),
                     ("alias_bytes", "aliased (donated)")):
    rows.append(f"  {label:<18} {_size(first['memory'][key]):>20} "
                f"{_size(global_['memory'][key]):>20}")
  for name in sorted(set(first["collectives_per_step_executed"])
                     | set(global_["collectives_per_step_executed"])):
    a = first["collectives_per_step_executed"].get(name, 0)
    b = global_["collectives_per_step_executed"].get(name, 0)
    if a or b:
      moved = [f"{count} moving " + _size(
          step["collective_bytes_per_step"].get(name, 0))
               for count, step in ((a, first), (b, global_))]
      rows.append(f"  {name:<18} {moved[0]:>20} {moved[1]:>20}")
  return ["what the global step moved, per device (compiled on the Port's "
          "state and first batch):",
          f"  {'':<18} {'first step':>20} {'global step':>20}", *rows]
