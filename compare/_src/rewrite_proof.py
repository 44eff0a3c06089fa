"""`python -m compare.rewrite ... --prove SPEC`: the rewrite proved.

SPEC names the team's `compare.Port` for the original program (as
`python -m compare --program` takes it). Its `pmap_step` must be one of the
rewritten file's pmaps (found by identity in the original module); the same
name in the rewritten file is proved against it, through `compare.prove`,
in place of the Port's own `port_step`. The rewrite keeps pmap's stacked
layout, so the proved step takes the Port's layout (one state replicated on
the mesh, the global batch split over it) and hands the rewritten step
pmap's (`_on_mesh`).
"""

import dataclasses
import importlib.util
import pathlib
import sys

from compare._src import port as port_module
from compare._src import port_steps
from compare._src import proof as proof_module


def _original_name(port, source: pathlib.Path) -> str:
  """The name the original module gives the Port's pmap_step."""
  for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if path and pathlib.Path(path).resolve() == source.resolve():
      for name, value in vars(module).items():
        if value is port.pmap_step:
          return name
  raise port_module.PortError(
      f"--prove: the Port's pmap_step is not a pmap of {source} (it must be "
      "the module's own name for it, e.g. p_train_step, not a wrapper)")


def _rewritten_module(target: pathlib.Path):
  spec = importlib.util.spec_from_file_location(
      f"_compare_rewrite_{target.stem}", target)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _on_mesh(stacked_step, n_devices: int, broadcast: bool):
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

  return jax.jit(step)


def prove(port, source: pathlib.Path, target: pathlib.Path,
          steps: int | None = None) -> int:
  """Proves the rewritten step against the Port's pmap_step; prints the
  report and returns the proof's exit code (2: it cannot be proved)."""
  name = _original_name(port, source)
  rewritten = getattr(_rewritten_module(target), name)
  checked = port_module.check(port)
  proved = dataclasses.replace(port, port_step=_on_mesh(
      rewritten, port.mesh.size,
      checked.pmap_layout == port_steps.BROADCAST))
  proof = proof_module.prove(proved, steps=steps, windows=1)
  print(f"proving {target}'s {name} against {source}'s:")
  print(proof.table())
  return proof.exit_code
