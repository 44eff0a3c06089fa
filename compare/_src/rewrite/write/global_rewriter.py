"""The global step's writer: `GlobalRewriter`, one LibCST transform.

What comes in: the steps' layouts (`global_layouts.read`), the placements
and reads to replace, the axis; and, where the file is written without
the first step's helpers, the plan for it (`global_plain.Plan`). What goes
out: the module rewritten, each pmap with its global in_specs and out_specs
(`plan.step_specs`), with the helpers' template (`rewrite_pmap`) or none
(`global_plain.PlainPorts`), each `replicate`/`shard`/`prefetch_to_device`
a placement on the mesh and each read of a replicated value the value
itself (`placements`), and a finding per change; `written.blockers` where
the writing meets what the global step cannot take. Its parts are composed:
the pmaps' sites (`pmap_sites`), the placements, the plain ports; each
records into the one `pmap_sites.Written`.
"""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.plan import step_specs
from compare._src.rewrite.read import names
from compare._src.rewrite.write import global_plain
from compare._src.rewrite.write import pipeline_written
from compare._src.rewrite.write import placements
from compare._src.rewrite.write import pmap_sites
from compare._src.rewrite.write import rewrite_pmap


class GlobalRewriter(cst.CSTTransformer):
  """The global step: each pmap with its step's global layout, and the
  placements and reads of the global step."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,
                           metadata.ScopeProvider)

  def __init__(self, aliases, steps, replace, axis_code, known,
               declared=None, plain: "global_plain.Plan | None" = None):
    """`declared`: the name of the step the Port declares; `plain`: the
    plan to write the file without helpers (None: with them)."""
    super().__init__()
    self.written = pmap_sites.Written()
    self._steps = {s.line: s for s in steps.values()}
    self._declared = declared
    self.sites = pmap_sites.PmapSites(aliases, None, self.get_metadata,
                                      self._template, self.written)
    self.plain = None
    if plain is None:
      shardings = placements.HelperShardings(axis_code)
    else:
      shardings = global_plain.PlainShardings(plain, axis_code)
      self.plain = global_plain.PlainPorts(plain, self._steps, self.written,
                                           self.sites, self.specs)
    self.placements = placements.Placements(known, replace, shardings,
                                            self.written.findings)

  def specs(self, line, in_axes, out_axes, axis) -> step_specs.StepSpecs:
    """The global specs of the port at `line` (`plan.step_specs`), its
    places and finding recorded."""
    made = step_specs.step_specs(self._steps[line], self._declared, line,
                                 in_axes, out_axes, axis)
    self.written.blockers += made.blockers
    if made.kept is not None:
      self.written.findings.append(made.kept)
    return made

  def _layout_of(self, line, in_axes, out_axes, axis):
    """The helpers' template's layout of the port at `line`."""
    made = self.specs(line, in_axes, out_axes, axis)
    return made.in_axes, made.out_axes, made.in_code, made.out_code

  def _template(self, named, line, column):
    if self.plain is not None:
      return self.plain.template(named, line, column)
    return rewrite_pmap.helper_template(self.written, self._layout_of, named,
                                        line, column)

  def visit_Module(self, node):
    if self.plain is not None:
      self.plain.visit_module(node)
    self.sites.visit_module(node)
    return True

  def visit_Call(self, node):
    self.sites.visit_call(node)
    return True

  def leave_Call(self, original, updated):
    line = self.sites.line(original)
    # Where the call starts: a placement written there stays in 79 columns.
    column = self.sites.column(original)
    self.placements.column = column
    name = names.dotted(original.func)
    written = self.placements.call(original, updated, name, line)
    if written is None:
      written = self.sites.leave_call(original, updated, column)
    if self.plain is not None:
      return self.plain.after_call(original, written, line)
    return written

  def leave_Subscript(self, original, updated):
    return self.placements.subscript(original, updated,
                                     self.sites.line(original))

  def leave_Yield(self, original, updated):
    return pipeline_written.yielded(self.placements.known, self.get_metadata,
                                    original, updated)

  def leave_SimpleStatementLine(self, original, updated):
    return pipeline_written.dropped(self.placements.known, original, updated)

  def leave_FunctionDef(self, original, updated):
    if self.plain is not None:
      written = self.plain.function_def(original, updated)
      if written is not None:
        return written
    return self.sites.leave_function_def(original, updated)

  def visit_Assign(self, node):
    self.sites.visit_assign(node)
    return True

  def leave_Assign(self, original, updated):
    self.sites.leave_assign(original)
    return updated

  def leave_Module(self, original, updated):
    self.sites.leave_module()
    return updated

