"""Where a file builds a pmap, each written as a port: `PmapSites`.

Every step's writer holds one (composed, not inherited): it finds the pmaps
(a call, a decorator, `functools.partial(jax.pmap, ...)` as either), reads
their arguments (`read.pmap_arguments`), and writes each with the step's
`Template`, recording a `records.Port` (bound to the module's name for it,
where there is one) and the findings: a pmap inside a pmap left whole, a
collective over an axis no pmap names, a call jax 0.10 removed, a call that
keeps pmap's stacked layout. What comes in: the file's pmap aliases, its
path (for the axis constants it imports), the writer's metadata. What goes
out: the rewritten nodes, and `Written`, what the writing recorded.
"""

import dataclasses
from typing import Callable

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import names
from compare._src.rewrite.read import pmap_arguments
from compare._src.rewrite.read import stacked_calls
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.read.names import dotted
from compare._src.rewrite.read.names import is_pmap
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Port
from compare._src.rewrite.records import Subject

# Collectives whose axis must be one a pmap of this file names.
_COLLECTIVES = ("pmean", "psum", "pmax", "pmin", "all_gather", "axis_index",
                "ppermute", "psum_scatter", "all_to_all", "pshuffle")
# Where a port's source names the pmapped function (`Port.template`).
FUN = "__pmapped_function__"


@dataclasses.dataclass
class Written:
  """What a step's writing records, shared by its parts (the sites, the
  step's template, the placements) and read by the pipeline."""

  findings: list = dataclasses.field(default_factory=list)
  ports: list = dataclasses.field(default_factory=list)
  axes: list = dataclasses.field(default_factory=list)  # each pmap's named
  # A pmap naming no axis is written over "devices" (none of its names).
  unnamed: bool = False
  changed: int = 0
  uses_static: bool = False
  uses_put: bool = False
  # Places the global step's writing met that it cannot take.
  blockers: list = dataclasses.field(default_factory=list)


# `(pmap's arguments by name, its line, the column its call starts at)` ->
# `(its layout as `records.Port`'s fields, its source with `FUN` for the
# function)`, or None where it is not written (a finding says why).
Template = Callable[[dict, int, int], "tuple[dict, str] | None"]


class PmapSites:
  """The pmaps of one file, written with `template`; `written` records."""

  def __init__(self, aliases, path, meta, template: Template,
               written: Written):
    """`meta`: the writer's `get_metadata` (positions and scopes)."""
    self._aliases, self._path, self._meta = aliases, path, meta
    self._template, self.written = template, written
    self._nested: set[int] = set()
    self._assigned: list[int] = []  # the ports made before each assignment
    self._collective_axes, self._strings = [], {}

  def line(self, node) -> int:
    """Where `node` starts."""
    return self._meta(metadata.PositionProvider, node).start.line

  def column(self, node) -> int:
    """The column `node` starts at."""
    return self._meta(metadata.PositionProvider, node).start.column

  def arguments(self, args, line):
    """pmap's arguments by name, or None after a `person` finding; the
    axis they name recorded."""
    read = pmap_arguments.arguments(args, line)
    if read.axis is not None:
      self.written.axes.append(self._axis_value(read.axis))
    if read.finding is not None:
      self.written.findings.append(read.finding)
    return read.named

  def port(self, fun_code: str, named, line, column=0) -> str | None:
    """The port's source, recorded with its layout (`records.Port`)."""
    made = self._template(named, line, column)
    if made is None:
      return None
    layout, template = made
    self.written.ports.append(Port(
        line, fun_code, template, mapped=pmap_arguments.mapped_names(
            cst.parse_expression(fun_code)), **layout))
    return template.replace(FUN, fun_code)

  def _axis_value(self, node) -> str:  # `pmap_arguments.axis_value`
    return pmap_arguments.axis_value(node, self._strings, self._meta(
        metadata.ScopeProvider, node, None))

  def builds_pmap(self, node) -> bool:
    """Whether `node` calls jax.pmap or functools.partial(jax.pmap, ...)."""
    return names.builds_pmap(node, self._aliases)

  def is_pmap_decorator(self, expr) -> bool:
    """Whether a decorator is jax.pmap or functools.partial(jax.pmap, ...)."""
    return names.is_pmap_decorator(expr, self._aliases)

  def visit_module(self, node):
    self._collective_axes = []
    self._strings = pmap_arguments.module_strings(node, self._path)

  def visit_call(self, node):
    # A pmap inside a pmap is left whole: its inner pmap is not rewritten
    # on its own (leave_call sees the inner one first).
    if self.builds_pmap(node) and node.args and self.builds_pmap(
        node.args[0].value):
      self._nested.add(id(node.args[0].value))

  def leave_call(self, original, updated, column=0):
    """The call written: a pmap as its port, a removed call by its helper;
    the findings of each call the step reads."""
    line = self.line(original)
    name = dotted(original.func)
    tail = name.rsplit(".", 1)[-1]
    found = self.written.findings
    if id(original) in self._nested:
      return updated
    if self.builds_pmap(original) and original.args and self.builds_pmap(
        original.args[0].value):
      for node in (original, original.args[0].value):
        self.written.axes += [self._axis_value(axis) for axis in
                              pmap_arguments.axis_nodes(node, self._aliases)]
      found.append(Finding(
          line, Kind.PERSON, "a pmap inside a pmap, left whole: a 2-D mesh "
          "with both axes (docs/MIGRATION.md#nested-pmap)"))
      return updated
    if is_pmap(original.func, self._aliases):
      named = self.arguments(original.args, line)
      if named is None or "fun" not in named:
        if named is not None:
          found.append(Finding(line, Kind.PERSON, "pmap without a "
                               "function to map"))
        return updated
      port = self.port(code_of(updated.args[0].value), named, line, column)
      return cst.parse_expression(port) if port else updated
    if tail in _COLLECTIVES and ("lax" in name or name == tail):
      self._collective(original, tail, line)
    if names.is_partial_pmap(original.func, self._aliases):
      named = self.arguments([*original.args, *original.func.args[1:]],
                             line)
      port = named and self.port(code_of(updated.args[0].value), named,
                                 line, column)
      return cst.parse_expression(port) if port else updated
    return self._other_call(updated, name, tail, line)

  def _other_call(self, updated, name, tail, line):
    """A call that builds no pmap: another library's pmap, a call jax 0.10
    removed (by its helper), or one that keeps the stacked layout."""
    found = self.written.findings
    if name.endswith(("nnx.pmap", "filter_pmap")):
      found.append(Finding(line, Kind.PERSON, (
          f"{name}: flax NNX and equinox map their own state; port it to "
          "nnx.shard_map under nnx.jit or eqx.filter_jit over "
          "jax.shard_map by hand (the guide's examples/nnx_mlp and "
          "examples/equinox_mlp; a file whose pmaps are all theirs is "
          "ported)")))
    if name in stacked_calls.REMOVED_PUTS:
      self.written.uses_put = True
      helper = stacked_calls.REMOVED_PUTS[name]
      found += [Finding(line, Kind.CHANGED, stacked_calls.removed(name),
                        Subject.REMOVED_CALL),
                Finding(line, Kind.KEPT, stacked_calls.kept(helper))]
      return updated.with_changes(func=cst.Name(helper))
    if stacked_calls.keeps_stack(name, tail):
      found.append(Finding(line, Kind.KEPT, stacked_calls.kept(name)))
    return updated

  def _collective(self, call, tail, line):
    axis = next((a.value for a in call.args
                 if a.keyword and a.keyword.value == "axis_name"), None)
    if axis is None and len(call.args) > (0 if tail == "axis_index" else 1):
      axis = call.args[0 if tail == "axis_index" else 1].value
    if isinstance(axis, cst.SimpleString):
      self._collective_axes.append((line, axis.evaluated_value, tail))

  def leave_function_def(self, original, updated):
    """A function with a pmap decorator: the function, then its name bound
    to its port (a person's place where other decorators share it)."""
    kept, ports = [], []
    line = self.line(original)
    for decorator, before in zip(updated.decorators, original.decorators):
      expr = decorator.decorator
      line = self.line(before)
      if is_pmap(expr, self._aliases):
        ports.append({})
      elif names.is_partial_pmap(expr, self._aliases):
        named = self.arguments(
            [cst.Arg(cst.Name("_fun")), *expr.args[1:]], line)
        if named is None:
          kept.append(decorator)
          continue
        ports.append(named)
      else:
        kept.append(decorator)
    if not ports:
      return updated
    if len(ports) > 1 or kept:
      self.written.findings.append(Finding(
          line, Kind.PERSON, "a pmap decorator beside other decorators: "
          "their order decides what is mapped"))
      return updated
    name = updated.name.value
    port = self.port(name, {"fun": cst.Name(name), **ports[0]}, line)
    if port is None:
      return updated
    if self.module_level(original):
      self._bound(len(self.written.ports) - 1, name)
    return cst.FlattenSentinel([
        updated.with_changes(decorators=[]),
        cst.parse_statement(f"{name} = {port}\n").with_changes(
            leading_lines=[cst.EmptyLine()])])

  def module_level(self, node) -> bool:
    """Whether `node` is in the module's own scope."""
    return isinstance(self._meta(metadata.ScopeProvider, node, None),
                      metadata.GlobalScope)

  def _bound(self, first: int, name: str) -> None:
    """The ports made since `first`, recorded as bound to `name` (the
    written module's name for them: `records.Port.name`)."""
    ports = self.written.ports
    ports[first:] = [dataclasses.replace(p, name=name) for p in ports[first:]]

  def visit_assign(self, node):
    del node
    self._assigned.append(len(self.written.ports))

  def leave_assign(self, original):
    first = self._assigned.pop()
    # Bound only where the value is the pmap itself (not a dict or a call
    # holding one): the written module's name is then the step's.
    if (len(original.targets) == 1
        and len(self.written.ports) == first + 1
        and isinstance(original.targets[0].target, cst.Name)
        and self.builds_pmap(original.value)
        and self.module_level(original)):
      self._bound(first, original.targets[0].target.value)

  def leave_module(self):
    """Each collective over an axis no pmap of the file names."""
    if "*" not in self.written.axes:
      for line, axis, tail in self._collective_axes:
        if axis not in self.written.axes:
          self.written.findings.append(Finding(line, Kind.PERSON, (
              f"{tail} over {axis!r}, an axis no pmap of this file names: "
              "give it the mesh axis it runs under")))
