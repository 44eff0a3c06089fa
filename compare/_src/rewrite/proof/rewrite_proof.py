"""`python -m compare.rewrite ... --prove SPEC`: the rewrite proved.

SPEC names the team's `compare.Port` for the original program (as
`python -m compare --program` takes it). Its `pmap_step` must be one of the
rewritten file's pmaps (found by identity in the original module); the same
name in the rewritten file is proved against it, through `compare.prove`,
in place of the Port's own `port_step`. A pmap made inside a function
(flax's nlp_seq's `p_train_step`) has no name in the module: the Port's
`pmap_step` is then a pmap of one of the file's functions (or a
`functools.partial` of one), and the port is the rewritten file's one port
of it (`local_port`); the Port's `port_step` may be None. `script_proof`
makes a Port of both files run as scripts (`--prove __main__`).

What comes in: the Port, both files, and the writer's records of the
rewrite (`records.Rewrite`: each port's bound name, the names its function
names, its axes; the names the file defines; whether it sets jax's mesh
after its join), handed on by the command or made again from the original
as the command made them. Nothing of the written text is parsed for them.
What goes out: the proof's report, printed, and its exit code.
The first step keeps pmap's stacked layout: the proved step takes the
Port's (one state replicated on the mesh, the global batch split over it)
and hands the rewritten step pmap's (`on_port_layout`).
"""

import dataclasses
import importlib.util
import pathlib
import sys
import tempfile

from compare._src.prove import port as port_module
from compare._src.prove import proof as proof_module
from compare._src.rewrite import pipeline
from compare._src.rewrite.proof import local_port
from compare._src.rewrite.proof import on_port_layout
from compare._src.rewrite.proof import rewrite_cost


def original_name(port, source: pathlib.Path) -> str | None:
  """The name the original module gives the Port's pmap_step, or None."""
  for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if path and pathlib.Path(path).resolve() == source.resolve():
      for name, value in vars(module).items():
        if value is port.pmap_step:
          return name
  return None


def local_pmap_line(pmap_step, source: pathlib.Path) -> int | None:
  """The line of `source`'s one pmap of the function `pmap_step` maps (a
  pmap made inside a function), or None."""
  mapped = local_port.mapped_function(pmap_step, source)
  ports = local_port.mapping(local_port.first_step(source).ports,
                             mapped[1]) if mapped else []
  return ports[0].line if len(ports) == 1 else None


def declared_step(port, source: pathlib.Path):
  """The step of `source` whose layout the Port declares (its `pmap_step`,
  or the step a `compare.adapt_step` adapts), as a `pipeline.Declared`;
  None where `source` names neither."""
  signature = getattr(port.pmap_step, "signature", None)
  step = port if signature is None else dataclasses.replace(
      port, pmap_step=signature.step)
  name = original_name(step, source)
  if name is not None:
    return pipeline.Declared.of(name, signature)
  line = local_pmap_line(step.pmap_step, source)
  return None if line is None else pipeline.Declared.of(
      f"the pmap of line {line}", signature, line)


def written_rewrite(port, source: pathlib.Path, global_step: bool):
  """The writer's records of `source`'s rewrite, made as the command made
  them (each process of `--processes`, or a caller that wrote the file):
  `--global`'s with the step the Port declares (`port`; None: none)."""
  if not global_step:
    return local_port.first_step(source)
  return pipeline.rewrite_global_source(
      source.read_text(), str(source), port and declared_step(port, source))


def _rewritten_module(target: pathlib.Path, source: pathlib.Path):
  # Run as the original's module, in its sys.modules place while it runs:
  # a Port that imports the original has run its absl flag definitions,
  # and absl takes another module object of the same name defining them
  # again as a re-import, where any other raises DuplicateFlagError (flax
  # nlp_seq's train.py). The original's entry is put back.
  spec = importlib.util.spec_from_file_location(source.stem, target)
  module = importlib.util.module_from_spec(spec)
  original = sys.modules.get(source.stem)
  sys.modules[source.stem] = module
  try:
    spec.loader.exec_module(module)
  finally:
    if original is None:
      del sys.modules[source.stem]
    else:
      sys.modules[source.stem] = original
  return module



def _bound(rewrite, name: str) -> dict:
  """The axes the writer recorded for the port bound to `name` ({} where
  it recorded none: the step is then proved on pmap's layout)."""
  return next((p.axes for p in rewrite.ports if p.name == name), {})


def _written_port(port, source: pathlib.Path, target: pathlib.Path,
                  rewrite):
  """`(the step, its axes, its name)`: the written file's port of the
  Port's pmap_step, found by name or, for a pmap made inside a function,
  by the function it maps; its axes the writer's (`rewrite`)."""
  signature = getattr(port.pmap_step, "signature", None)
  inner = port if signature is None else dataclasses.replace(
      port, pmap_step=signature.step)
  name = original_name(inner, source)
  module = _rewritten_module(target, source)
  if name is not None:
    step, axes = getattr(module, name), _bound(rewrite, name)
  else:
    step, record, line = local_port.step(inner, source, rewrite, module)
    axes, name = record.axes, f"pmap of line {line}"
  if signature is None:
    return step, axes, name
  # Adapted alike, the written step takes the Port's (state, batch) as
  # the declared layout placed them: all P(), the batch P(axis), the
  # metrics per device; a named step's outputs as its writer laid them
  # out (a loss the step pmeans: one value, P()), one axis for both alike.
  adapted = {"in_axes": (None, None), "out_axes": (None, 0)}
  out = axes.get("out_axes", adapted["out_axes"])
  if original_name(inner, source) is not None:
    adapted["out_axes"] = out if isinstance(out, tuple) else (out, out)
  return signature.adapt(step), adapted, name


def prove(port, source: pathlib.Path, target: pathlib.Path,
          steps: int | None = None, global_step: bool = False,
          written=None, rewrite=None) -> int:
  """Proves the rewritten step against the Port's pmap_step; prints the
  report and returns the proof's exit code (2: it cannot be proved).
  `global_step`: the rewrite took the state placed once (`--global`), so
  the port runs on the Port's own layout, no adapter. `written`: `(step,
  axes, name)` of scripts' Port (`script_proof`), else found in `target`
  by the writer's records: `rewrite`, the command's, or made again
  (`written_rewrite`)."""
  if rewrite is None:
    rewrite = written_rewrite(None if written else port, source,
                              global_step)
  rewritten, axes, name = written or _written_port(port, source, target,
                                                   rewrite)
  moved = None
  # A file that sets jax's mesh after its join: the Port's, while proved.
  mesh = port.mesh if rewrite.mesh_after_join else None
  if global_step and all(isinstance(axes.get(k), tuple) and len(axes[k]) == 2
                         for k in ("in_axes", "out_axes")):
    proved = dataclasses.replace(port, port_step=on_port_layout.on_global_mesh(
        rewritten, axes, port.mesh.size, mesh))
    port_module.check(proved)
    moved = (["what the global step moved: not measured for a step "
              "proved through compare.adapt_step (a Port's, or --prove "
              "__main__'s): its arguments are not the Port's (state, batch)"]
             if hasattr(port.pmap_step, "signature")
             else _what_moved(port, source, target, rewritten, axes, mesh))
  else:
    proved = on_port_layout.with_layout(port, rewritten)
  proof = proof_module.prove(proved, steps=steps, windows=1)
  print(f"proving {target}'s {name} against {source}'s:")
  print(proof.table())
  if moved:
    print("\n".join(moved))
  return proof.exit_code


def _what_moved(port, source, target, global_port, axes, mesh) -> list:
  """`rewrite_cost.lines` of the first step's port of the same pmap (the
  first step written to a temporary folder) and the global one."""
  first_step = local_port.first_step(source)
  with tempfile.TemporaryDirectory() as folder:
    first = pathlib.Path(folder) / target.name
    first.write_text(first_step.code)
    first_port, first_axes, _ = _written_port(port, source, first,
                                              first_step)
  first_axes = {k: v if isinstance(v, tuple) else (v, v)
                for k, v in first_axes.items()}
  return rewrite_cost.lines(rewrite_cost.describe(port, first_port,
                                                  first_axes),
                            rewrite_cost.describe(port, global_port, axes,
                                                  mesh))
