"""The global step written: without the first step's helpers where the plan
allows (`plain`), else with them (`with_helpers`), one writer
(`global_rewriter.GlobalRewriter`) either way.

What comes in: the module (and its metadata wrapper), the first step's
ports, the steps' layouts, the reads to replace, the axis, the pipeline's
batches (`known`), the Port's declared step. What goes out: the code and
what its writing recorded (`Plain`, or `pmap_sites.Written`), or why the
file keeps the helpers.
"""

import dataclasses

from compare._src.rewrite.layouts import B, R
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.write import global_joined
from compare._src.rewrite.write import global_plain
from compare._src.rewrite.write import global_rewriter
from compare._src.rewrite.write import global_written
from compare._src.rewrite.write import imports


@dataclasses.dataclass(frozen=True)
class Plain:
  """The file written without helpers: its code, findings, ports, the
  module-level names it defines, whether it sets the mesh after a join."""

  code: str
  findings: list
  ports: list
  defined: tuple
  mesh_after_join: bool


def _visited(wrapper, aliases, steps, replace, axis, known, declared,
             plain=None):
  writer = global_rewriter.GlobalRewriter(
      aliases, steps, replace, axis, known, declared and declared.name,
      plain=plain)
  return wrapper.visit(writer), writer


def plain(wrapper, module, first, steps, replace, axis, known, declared,
          axes_count, source, aliases):
  """The file written without helpers (`Plain`); a str saying why it keeps
  them; None where the writer found a place for a person (the helpers'
  writer finds it again and reports it)."""
  made = global_plain.plan(wrapper, first.ports, steps, axes_count, source)
  if made.reason:
    return f"the first step's helpers stay in this file: {made.reason}"
  made.names = global_written.names(wrapper.module, (R, B))
  args = (wrapper, aliases, steps, replace, axis, known, declared)
  new, writer = _visited(*args, plain=made)
  made.inline = tuple(k for k, n in writer.placements.shardings.counts.items()
                      if n == 1)
  made.edits = writer.plain.edits
  if made.inline or made.edits:
    new, writer = _visited(*args, plain=made)
  written, ports = writer.written, writer.plain
  if written.blockers:
    return None
  if written.uses_put or written.uses_static:
    ports.unplain = ("it calls functions jax 0.10 removed, whose "
                     "replacements are helpers")
  if ports.unplain:
    return f"the first step's helpers stay in this file: {ports.unplain}"
  if made.joined:
    code = imports.with_mesh(new.code, module, "", ports.uses_functools)
    code, _ = global_joined.set_mesh_after_join(code, axis)
    line, _ = global_joined.where(source)
    written.findings.append(Finding(line, Kind.CHANGED, (
        "jax.set_mesh(Mesh(every process's devices)) after the join: the "
        "steps' shard_map name no mesh and the placements only a "
        "jax.P(...); a mesh built at import would start the backend before "
        "jax.distributed.initialize")))
    return Plain(code, written.findings, written.ports, (), True)
  counts = writer.placements.shardings.counts
  bound = {"mesh": made.names["mesh"],
           **{k: made.names[k] for k in counts if k not in made.inline}}
  return Plain(imports.with_mesh(
      new.code, module, global_written.mesh_block(axis, bound),
      ports.uses_functools), written.findings, written.ports,
               tuple(bound.values()), False)


def with_helpers(wrapper, module, aliases, steps, replace, axis, known,
                 declared):
  """The file written with the first step's helpers: `(code, written)`;
  the code None where the writing met places (`written.blockers`)."""
  new, writer = _visited(wrapper, aliases, steps, replace, axis, known,
                         declared)
  written = writer.written
  if written.blockers:
    return None, written
  return imports.with_imports(new.code, module, written.uses_static,
                              written.uses_put), written
