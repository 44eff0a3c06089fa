"""The global step written without helpers (`global_written` says how).

`PlainPorts` is how `global_rewriter.GlobalRewriter` writes each step
without them: `jax.jit(jax.shard_map(f, mesh=mesh, ...))` on one
module-level mesh, placements naming module-level shardings
(`PlainShardings`), no `_pmap_*` helper. `plan` decides, before writing,
whether a file can be written so and with what (each step's `check_vma`,
the names it binds); `reason` says why not, and the file then gets the
helpers, as before (`global_step`).
"""

import ast
import dataclasses

import libcst as cst
from libcst import metadata

from compare._src.rewrite import records
from compare._src.rewrite.layouts import R, S
from compare._src.rewrite.read import names
from compare._src.rewrite.read import pmap_arguments
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject
from compare._src.rewrite.plan.step_specs import spec
from compare._src.rewrite.write import global_joined
from compare._src.rewrite.write import global_keywords
from compare._src.rewrite.write import global_loops
from compare._src.rewrite.write import global_static
from compare._src.rewrite.write import global_written
from compare._src.rewrite.write import placements
from compare._src.rewrite.write.pmap_sites import FUN


@dataclasses.dataclass
class Plan:
  """What the plain writer needs: the names it binds, each step's
  `check_vma` (by the pmap's line: None at jax's default, else why False)."""

  names: dict
  vma: dict
  reason: str | None = None  # why the file keeps the helpers
  inline: tuple = ()  # the shardings one placement names: written there
  loads: dict = dataclasses.field(default_factory=dict)  # name -> reads
  edits: dict = dataclasses.field(default_factory=dict)  # `PlainPorts`
  joined: bool = False  # the mesh set after a join (`global_joined`)
  keywords: dict = dataclasses.field(default_factory=dict)  # by step name


def plan(wrapper, ports, steps, axes_count, source) -> Plan:
  """The plan for a file, or one whose `reason` says why it keeps the
  first step's helpers (`ports`: the first step's, by line; `axes_count`:
  nonzero where its pmaps name several axes)."""
  module = wrapper.module
  positions = wrapper.resolve(metadata.PositionProvider)
  functions = global_written.definitions(module)

  def why():
    if axes_count:
      return ("its pmaps name several axes: each step its own mesh, which "
              "the helpers build")
    if global_joined.joins(source):
      found = global_joined.where(source)
      if isinstance(found, str):
        return found
    for step in steps.values():
      if step.static and global_static.count(step) is None:
        return (f"{step.name} has static_broadcasted_argnums and no call "
                "in this file says how many arguments it takes (jit's "
                "lambda names each; the helper _pmap_static binds them)")
    if any(p.devices is not None for p in ports):
      return "a pmap over given devices: the helpers build its mesh"
    return None

  reason = why()
  keywords = {}
  if reason is None:
    funs = {s.name: cst.parse_expression(p.fun_code) for s in steps.values()
            for p in ports if p.line == s.line and p.fun_code}
    keywords = global_keywords.plan(module, steps, functions, funs)
    if isinstance(keywords, str):
      reason, keywords = keywords, {}
  vma = {}
  for port in ports:
    fn = functions.get(global_written.mapped_name(port.fun_code) or "")
    found = fn and global_written.gradient_line(
        fn, functions, lambda n: positions[n].start.line)
    vma[port.line] = found and (
        f"check_vma=False: the step takes {found[0]}(...) of arguments "
        f"placed with P(); under jax's check that "
        "gradient arrives summed over the mesh and the step's own pmean "
        "would leave it N times too large (docs/MIGRATION.md#trap-gradient)"
    ) or (fn and global_loops.unchecked(
        fn, functions, module, lambda n: positions[n].start.line))
  loads = {}
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
      loads[node.id] = loads.get(node.id, 0) + 1
  # Functions defined once in the file, at any depth (flax nlp_seq's
  # eval_step is local to train_and_evaluate): pmap's view goes in the body
  # of one only the pmap reads.
  defs = [n.name for n in ast.walk(ast.parse(source))
          if isinstance(n, ast.FunctionDef)]
  defined = {n for n in defs if defs.count(n) == 1}
  return Plan({}, vma, reason, loads={n: c for n, c in loads.items()
                                      if n in defined},
              joined=global_joined.joins(source), keywords=keywords)


def _own_function(fun, loads) -> str | None:
  """The module-level function a pmap maps (`f`, or `functools.partial(f,
  k=v)`: keywords only, the positions stay the function's) where that
  pmap is the one read of it, else None."""
  if isinstance(fun, cst.Call) and names.dotted(fun.func) in (
      "functools.partial", "partial") and fun.args and all(
          a.keyword is not None for a in fun.args[1:]):
    fun = fun.args[0].value
  if isinstance(fun, cst.Name) and loads.get(fun.value) == 1:
    return fun.value
  return None


def _recorded(stacked_args, count, outs, in_code, out_code) -> dict:
  """The layout of a step written without helpers, as `records.Port`
  records it: of its first two arguments (of `count`), those whose body
  takes pmap's view stacked (0), the rest one value (None); its outputs
  as its out_specs lay them out (one spec for every output: two alike)."""
  each = [None if k in (R, None) else 0 for k in outs]
  return {"in_axes": tuple(0 if i in stacked_args else None
                           for i in range(min(2, count))) or (None, None),
          "out_axes": tuple(each) if out_code.startswith("(")
                      else (each[0],) * 2,
          "in_specs": in_code, "out_specs": out_code}


class PlainShardings:
  """Shardings on the module's mesh: named where two placements share
  one, written in place where one does (`Plan.inline`), a bare `jax.P`
  on the mesh jax is set to after a join; `counts` how many name each."""

  def __init__(self, plain: Plan, axis_code):
    self._plan, self._axis = plain, axis_code
    self._helpers = placements.HelperShardings(axis_code)
    self.counts = {}  # R, B -> how many placements name it

  def said(self, kind) -> str:
    """How the report names a placement's sharding of `kind`."""
    if self._plan.joined:
      return f"jax.P({'' if kind == R else self._axis}) on the set mesh"
    return self._helpers.said(kind)

  def code(self, kind) -> str:
    """The code of the sharding a placement of `kind` names."""
    self.counts[kind] = self.counts.get(kind, 0) + 1
    if self._plan.joined:  # on the mesh jax is set to
      return spec(kind, self._axis)
    if kind in self._plan.inline:
      return (f"jax.NamedSharding({self._plan.names['mesh']}, "
              f"{spec(kind, self._axis)})")
    return self._plan.names[kind]


class PlainPorts:
  """Each step written on the module's mesh, no helper: the template of a
  pmap call (`template`), a decorated step (`function_def`), its calls
  by keyword (`after_call`). `unplain` says why a step could not be
  written so (the caller then writes the file with the helpers)."""

  def __init__(self, plain: Plan, steps, written, sites, specs):
    """`steps`: the steps' layouts by their pmap's line; `written`,
    `sites`: the writer's (`pmap_sites`); `specs`: its `(line, in_axes,
    out_axes, axis) -> step_specs.StepSpecs`, recording what it finds."""
    self._plan, self._steps, self._written = plain, steps, written
    self._sites, self._specs = sites, specs
    self.unplain = None
    self.uses_functools = False
    # Functions only an assigned pmap reads: pmap's view goes in their body.
    self.edits = {}
    # What `global_step.write` recorded of the file (`records.Rewrite`).
    self.defined, self.mesh_after_join = (), False
    self._functions = {}

  def visit_module(self, node):
    self._functions = global_written.definitions(node)  # their parameters

  def _parts(self, named, line):
    """`(shard_map's keyword parts, donate code, stacked argument
    positions, stacked output positions)` of the pmap at `line`, with its
    finding."""
    axis = (code_of(named["axis_name"]) if "axis_name" in named
            else '"devices"')
    literal = pmap_arguments.axes_literal
    in_axes = literal(named["in_axes"]) if "in_axes" in named else 0
    static = self._steps[line].static
    if isinstance(in_axes, tuple):  # pmap's counts the static positions
      in_axes = tuple(a for i, a in enumerate(in_axes) if i not in static)
    out_axes = literal(named["out_axes"]) if "out_axes" in named else 0
    made = self._specs(line, in_axes, out_axes, axis)
    kinds, outs = made.kinds, made.outs
    _, keywords = self._plan.keywords.get(self._steps[line].name, ((), ()))
    in_code = global_written.specs(kinds + [S] * len(keywords), axis)
    out_code = global_written.specs(outs, axis)
    vma = self._plan.vma.get(line)
    donate = (code_of(named["donate_argnums"])
              if "donate_argnums" in named else None)
    self._written.changed += 1
    self._written.findings.append(Finding(line, Kind.CHANGED, (
        f"pmap over {axis} -> jax.jit(jax.shard_map(...)) on the "
        + ("mesh set after the join" if self._plan.joined else
           "module's mesh") + f": in_specs {in_code}, out_specs {out_code}, "
        + (vma or "check_vma at jax's default (the step takes no gradient)")
        + (", donate_argnums kept" if donate else "")
        + (f"; called with keyword argument(s) {', '.join(keywords)}, "
           "which shard_map does not take: passed by position now, the "
           "step a lambda that names them, each with pmap's per-device view"
           if keywords else "")), Subject.PMAP,
        module_mesh=not self._plan.joined))
    stacked_args = [i for i, k in enumerate(kinds) if k == S]
    stacked_outs = ({None} if made.one_out and outs[0] == S else
                    {j for j, k in enumerate(outs) if k == S}
                    if not made.one_out else set())
    parts = global_written.shard_map_parts(
        None if self._plan.joined else self._plan.names["mesh"], in_code,
        out_code, vma is None)
    return parts, donate, stacked_args, stacked_outs, _recorded(
        stacked_args, len(kinds), outs, in_code, out_code)

  def template(self, named, line, column):
    """The step's layout (`records.Port`'s fields) and its source with
    `FUN` for the function, written from `column`; or None."""
    parts, donate, stacked_args, stacked_outs, layout = self._parts(named,
                                                                    line)
    step = self._steps[line]
    stacked_args = global_static.positions(step, stacked_args)
    if stacked_args or stacked_outs:
      name = _own_function(named["fun"], self._plan.loads)
      if name is None:
        self.unplain = (
            f"the step at line {line} takes or returns values in pmap's "
            "stacked layout, and its function is read elsewhere too (pmap's "
            "view written in its body would change those reads)")
      else:  # written in its body (the next pass: `Plan.edits`)
        self.edits[name] = (stacked_args, stacked_outs)
        self._viewed(line, stacked_args, stacked_outs)
    # Wrapped on the function's own source from the column the pmap's call
    # starts at (after its target's `x = `), then templated as the first
    # step's ports are (`records.Port`).
    fun_code = code_of(named["fun"])
    if step.static:
      written = self._static_template(named["fun"], step, parts, donate,
                                      column)
      return None if written is None else (layout, written)
    mapped = fun_code
    name = self._steps[line].name
    if name in self._plan.keywords:
      mapped = global_keywords.wrapped_function(fun_code,
                                                *self._plan.keywords[name])
      # What the step's lambda takes after the Port's (state, batch).
      layout["after_two"] = tuple(
          [*self._plan.keywords[name][0], *self._plan.keywords[name][1]][2:])
    return layout, global_written.step_expression(
        mapped, parts, donate, 79 - column).replace(fun_code, FUN, 1)

  def _static_template(self, fun, step, parts, donate, column):
    """The step of a pmap with static arguments (`global_static`)."""
    fn = self._functions.get(global_written.mapped_name(code_of(fun)) or "")
    params = global_static.parameter_names(
        fn, global_static.count(step), global_static.read_names(
            code_of(fun)))
    self._static_said(step.static)
    return global_static.step_expression(fun, params, step.static, parts,
                                         donate, 79 - column)

  def _static_said(self, static):
    # The pmap's own finding says where its static arguments went.
    found = self._written.findings
    found[-1] = dataclasses.replace(found[-1], text=found[-1].text + (
            f"; static_broadcasted_argnums {static} as jit's static_argnums,"
            " closed over by the function shard_map maps"))

  def after_call(self, original, written, line):
    """A step called with keyword arguments, called by position (its
    lambda names them: `global_keywords`)."""
    name = names.dotted(original.func)
    if name in self._plan.keywords and isinstance(written, cst.Call):
      keywords = self._plan.keywords[name][1]
      self._written.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(..., {', '.join(f'{k}=' for k in keywords)}...) -> "
          f"{name}(..., {', '.join(keywords)}): shard_map takes no keyword "
          "argument; the step's lambda names them")))
      return global_keywords.by_position(written, keywords)
    return written

  def _viewed(self, line, stacked_args, stacked_outs):
    # The pmap's own finding says where pmap's view stays, and how.
    found = self._written.findings
    found[-1] = dataclasses.replace(found[-1], line=line, text=(
        found[-1].text +
        "; pmap's per-device view of its "
        + ", ".join([f"argument {i}" for i in stacked_args]
                    + [f"output {j}" if j is not None else "output"
                       for j in sorted(stacked_outs, key=str)])
        + " (stacked or read per device by the program) written as a "
        "line in its body, no helper"))

  def function_def(self, original, updated):
    """A function the step's pmap maps, written: pmap's view in its body,
    or its pmap decorator as jit's and shard_map's; None where the sites
    write it (`pmap_sites.PmapSites.leave_function_def`)."""
    pmaps = [d for d in original.decorators
             if self._sites.is_pmap_decorator(d.decorator)]
    if not pmaps and updated.name.value in self._plan.edits:
      viewed = global_written.per_device(
          updated, *self._plan.edits[updated.name.value])
      if viewed is None:
        self.unplain = (f"{updated.name.value}'s parameters or return "
                        "cannot take pmap's view in its body")
        return updated
      return viewed
    if not pmaps or len(original.decorators) > 1:
      return None
    if updated.name.value in self._plan.keywords:
      self.unplain = (f"{updated.name.value}, a pmap decorator's, is called "
                      "with keyword arguments, which shard_map does not take "
                      "(the helper _pmap_keywords maps them)")
      return updated
    expr = updated.decorators[0].decorator
    line = self._sites.line(original.decorators[0])
    named = {"fun": cst.Name(updated.name.value)}
    if isinstance(expr, cst.Call):
      args = self._sites.arguments(
          [cst.Arg(cst.Name("_fun")), *expr.args[1:]], line)
      named.update(args or {})
    parts, donate, stacked_args, stacked_outs, layout = self._parts(named,
                                                                    line)
    static = self._steps[line].static
    stacked_args = global_static.positions(self._steps[line], stacked_args)
    if stacked_args or stacked_outs:
      viewed = global_written.per_device(updated, stacked_args,
                                         stacked_outs)
      if viewed is None:
        self.unplain = (f"{updated.name.value}'s parameters or return "
                        "cannot take pmap's view in its body")
        return updated
      updated = viewed
      self._viewed(line, stacked_args, stacked_outs)
    self.uses_functools = True
    self._written.ports.append(records.Port(
        line, updated.name.value, "", name=updated.name.value if
        self._sites.module_level(original) else None,
        mapped=frozenset([updated.name.value]), **layout))
    column = self._sites.column(original)
    if static:
      written = global_static.step_function(updated, static, parts, donate,
                                            79 - column)
      if written is None:
        self.unplain = (f"{updated.name.value}'s parameters cannot name "
                        f"its static arguments {static}")
        return updated
      self._static_said(static)
      return written
    return updated.with_changes(decorators=[
        cst.Decorator(cst.parse_expression(d))
        for d in global_written.step_decorators(parts, donate, 79 - column)])


