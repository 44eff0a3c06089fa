"""The rewrite of one file: every `jax.pmap` into `jax.jit(jax.shard_map(...))`.

Built on LibCST, so comments and formatting survive. Each pmap (a call, a
decorator, `functools.partial(jax.pmap, ...)` as a decorator) becomes

    _pmap_call(lambda fun: jax.jit(_pmap_keywords(jax.shard_map(
        _pmap_view(fun, in_axes, out_axes), mesh=_pmap_mesh(axis),
        in_specs=..., out_specs=..., check_vma=False)), donate_argnums=...),
        f, axis, in_axes)

over a 1-D mesh of the devices pmap maps over, every process's, built once
per axis (`_pmap_mesh`). `_pmap_call` builds the step at its first call, as
pmap does (after `jax.distributed.initialize`), and hands each process's
rows in and out, as pmap does on many processes. pmap's layout is kept: a mapped argument is the stacked
`[devices, ...]` array, split over the mesh (`P(axis)`), a broadcast one
(`in_axes=None`) is replicated (`P()`), and `_pmap_view` hands the step each
device's block without its axis of 1, as pmap did. So every call site
(`replicate`, `shard`, `unreplicate`, `x[0]`) runs unchanged and the step
computes pmap's numbers; the report lists those call sites for the next
step, the state placed once on the mesh. `check_vma=False` is how pmap
runs: with it on, the gradient of a broadcast parameter (`in_axes=None`,
`P()`) arrives summed over devices, and the program's own `pmean` leaves N
times the gradient (the gradient trap). `static_broadcasted_argnums` become
jit's `static_argnums` (`_pmap_static`).

What it cannot rewrite safely it leaves as written, with a line saying why.
"""

import dataclasses

import libcst as cst
from libcst import metadata

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
# pmap's parameters, positional order first.
_POSITIONAL = ("fun", "axis_name")
_KNOWN = {"fun", "axis_name", "in_axes", "out_axes", "donate_argnums",
          "devices", "static_broadcasted_argnums", "axis_size", "backend"}
_FOR_A_PERSON = {
    "axis_size": "axis_size: pmap over a given axis size has no devices to "
    "build a mesh from",
    "backend": "backend: the mesh's devices choose the backend"}
# Where a port's source names the pmapped function (`Port.template`).
FUN = "__pmapped_function__"


def mapped_names(fun) -> frozenset[str]:
  """Every name a mapped function's expression names (`records.Port`)."""
  found = set()

  class Names(cst.CSTVisitor):

    def visit_Name(self, node):
      found.add(node.value)

  fun.visit(Names())
  return frozenset(found)


def _is_partial(node) -> bool:
  return dotted(node) in ("functools.partial", "partial")


def _specs(axes, axis_code: str) -> str:
  if axes is None:
    return "jax.P()"
  if axes == 0:
    return f"jax.P({axis_code})"
  inner = ", ".join(_specs(a, axis_code) for a in axes)
  return f"({inner},)" if len(axes) == 1 else f"({inner})"


class PmapRewriter(cst.CSTTransformer):
  """Rewrites every pmap it can; records a `Finding` for each."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,
                           metadata.ScopeProvider)

  def __init__(self, aliases, path: str | None = None):
    super().__init__()
    self.aliases = aliases
    self._path = path  # where imported axis constants are read from
    self.findings: list[Finding] = []
    self.axes: list[str] = []  # each pmap's that names one
    # A pmap naming no axis is written over "devices" (none of its names).
    self.unnamed = False
    self.changed = 0
    self.uses_static = False
    self.uses_put = False
    self._decorated: list[tuple[str, str]] = []
    self._nested: set[int] = set()
    self.ports: list[Port] = []
    self._assigned: list[int] = []  # the ports made before each assignment

  def _line(self, node) -> int:
    return self.get_metadata(metadata.PositionProvider, node).start.line

  def _arguments(self, args, line):
    """pmap's arguments by name, or None after a `person` finding."""
    named = {}
    for i, arg in enumerate(args):
      if arg.star:
        self.findings.append(Finding(line, Kind.PERSON, "pmap's arguments "
                                     "unpacked with */**: cannot read them"))
        return None
      key = arg.keyword.value if arg.keyword else (
          _POSITIONAL[i] if i < len(_POSITIONAL) else None)
      if key not in _KNOWN:
        self.findings.append(Finding(line, Kind.PERSON, f"pmap argument "
                                     f"{key or i} is not one pmap takes"))
        return None
      named[key] = arg.value
    axis = named.get("axis_name")
    if axis is not None:
      self.axes.append(self._axis_value(axis))
    for key, why in _FOR_A_PERSON.items():
      if key in named:
        self.findings.append(Finding(line, Kind.PERSON, why))
        return None
    return named

  def _port(self, fun_code: str, named, line) -> str | None:
    """The port's source, recorded with its layout (`records.Port`)."""
    written = self._template(named, line)
    if written is None:
      return None
    layout, template = written
    self.ports.append(Port(line, fun_code, template,
                           mapped=mapped_names(cst.parse_expression(fun_code)),
                           **layout))
    return template.replace(FUN, fun_code)

  def _template(self, named, line):
    """`(its layout as `records.Port`'s fields, the jit(shard_map(...))
    source for pmap(fun, **named) with `FUN` for the function)`, or
    None."""
    fun_code = FUN
    axis = (code_of(named["axis_name"]) if "axis_name" in named
            else '"devices"')
    self.unnamed |= "axis_name" not in named
    try:
      literal = pmap_arguments.axes_literal
      in_axes = literal(named["in_axes"]) if "in_axes" in named else 0
      out_axes = (literal(named["out_axes"]) if "out_axes" in named
                  else 0)
    except ValueError as err:
      self.findings.append(Finding(line, Kind.PERSON, f"in_axes/out_axes: {err}"
                                   "; the specs must be known here"))
      return None
    static = ()
    if "static_broadcasted_argnums" in named:
      try:
        static = pmap_arguments.argnums(named["static_broadcasted_argnums"])
      except ValueError as err:
        self.findings.append(Finding(line, Kind.PERSON, (
            f"static_broadcasted_argnums: {err}; jit needs them here")))
        return None
      if isinstance(in_axes, tuple):
        in_axes = tuple(a for i, a in enumerate(in_axes) if i not in static)
    mesh = (f"_pmap_mesh({axis}, tuple({code_of(named['devices'])}))"
            if "devices" in named else f"_pmap_mesh({axis})")
    donate = (f", donate_argnums={code_of(named['donate_argnums'])}"
              if "donate_argnums" in named else "")
    in_axes, out_axes, in_code, out_code = self._layout(line, in_axes,
                                                        out_axes, axis)
    layout = {"in_axes": in_axes, "out_axes": out_axes,
              "in_specs": f"({in_code}, jax.P({axis}))",
              "out_specs": out_code, "static": static,
              "devices": (code_of(named["devices"]) if "devices" in named
                          else None)}
    self.changed += 1
    self.uses_static = self.uses_static or bool(static)
    self.findings.append(Finding(line, Kind.CHANGED, (
        f"pmap over {axis} -> jax.jit(jax.shard_map(...)): in_specs "
        f"{in_code}, out_specs {out_code}, "
        "check_vma=False (as pmap runs)"
        + (", donate_argnums kept" if donate else "")
        + (f", static_broadcasted_argnums {static} as jit's static_argnums"
           if static else "")), Subject.PMAP))
    pad = " " * 4  # LibCST adds the enclosing block's own indentation.
    specs = (f"{pad}    in_specs=({in_code}, jax.P({axis})),\n"
             f"{pad}    out_specs={out_code},\n")
    called = (f"{pad}{fun_code}, {axis}, in_axes={in_axes!r}"
              + (f", devices=tuple({code_of(named['devices'])})"
                 if "devices" in named else "")
              + (f", static_argnums={static!r}" if static else "") + ")")
    if not static:
      return layout, (f"_pmap_call(lambda fun: jax.jit(\n"
              f"{pad}_pmap_keywords(jax.shard_map(\n"
              f"{pad}    _pmap_view(fun, in_axes={in_axes!r}, "
              f"out_axes={out_axes!r}),\n{pad}    mesh={mesh},\n"
              f"{specs}{pad}    check_vma=False)){donate}),\n{called}")
    specs = specs.replace(f"{pad}    ", f"{pad}        ")
    return layout, (f"_pmap_call(lambda fun: jax.jit(\n{pad}_pmap_static(\n"
            f"{pad}    lambda fn: jax.shard_map(\n"
            f"{pad}        _pmap_view(fn, in_axes={in_axes!r}, "
            f"out_axes={out_axes!r}),\n{pad}        mesh={mesh},\n"
            f"{specs}{pad}        check_vma=False),\n"
            f"{pad}    fun, {static!r}),\n"
            f"{pad}static_argnums={static!r}{donate}),\n{called}")

  def _layout(self, line, in_axes, out_axes, axis):
    """`(in_axes, out_axes, in_specs, out_specs)` of the port at `line`:
    pmap's stacked layout (the global step overrides it)."""
    del line
    return in_axes, out_axes, _specs(in_axes, axis), _specs(out_axes, axis)

  def _builds_pmap(self, node) -> bool:
    """Whether `node` calls jax.pmap or functools.partial(jax.pmap, ...)."""
    return isinstance(node, cst.Call) and (
        is_pmap(node.func, self.aliases)
        or (isinstance(node.func, cst.Call) and _is_partial(node.func.func)
            and bool(node.func.args)
            and is_pmap(node.func.args[0].value, self.aliases)))

  builds_pmap = _builds_pmap

  def is_pmap_decorator(self, expr) -> bool:
    """Whether a decorator is jax.pmap or functools.partial(jax.pmap, ...)."""
    return is_pmap(expr, self.aliases) or (
        isinstance(expr, cst.Call) and _is_partial(expr.func)
        and bool(expr.args) and is_pmap(expr.args[0].value, self.aliases))

  def _note_axis(self, node):
    """Records the axis a pmap-building call names (keyword or second
    positional argument of jax.pmap)."""
    args = list(node.args) if is_pmap(node.func, self.aliases) else list(
        node.func.args)
    for i, arg in enumerate(args):
      if (arg.keyword and arg.keyword.value == "axis_name") or (
          not arg.keyword and i == 1 and is_pmap(node.func, self.aliases)):
        self.axes.append(self._axis_value(arg.value))

  def _axis_value(self, node) -> str:  # `pmap_arguments.axis_value`
    return pmap_arguments.axis_value(node, self._strings, self.get_metadata(
        metadata.ScopeProvider, node, None))

  def visit_Call(self, node):
    # A pmap inside a pmap is left whole: its inner pmap is not rewritten
    # on its own (leave_Call sees the inner one first).
    if self._builds_pmap(node) and node.args and self._builds_pmap(
        node.args[0].value):
      self._nested.add(id(node.args[0].value))
    return True

  def leave_Call(self, original, updated):
    line = self._line(original)
    name = dotted(original.func)
    tail = name.rsplit(".", 1)[-1]
    if id(original) in self._nested:
      return updated
    if self._builds_pmap(original) and original.args and self._builds_pmap(
        original.args[0].value):
      for node in (original, original.args[0].value):
        self._note_axis(node)
      self.findings.append(Finding(
          line, Kind.PERSON, "a pmap inside a pmap, left whole: a 2-D mesh "
          "with both axes (docs/MIGRATION.md#nested-pmap)"))
      return updated
    if is_pmap(original.func, self.aliases):
      named = self._arguments(original.args, line)
      if named is None or "fun" not in named:
        if named is not None:
          self.findings.append(Finding(line, Kind.PERSON, "pmap without a "
                                       "function to map"))
        return updated
      port = self._port(code_of(updated.args[0].value), named, line)
      return cst.parse_expression(port) if port else updated
    if tail in _COLLECTIVES and ("lax" in name or name == tail):
      self._collective(original, tail, line)
    if (isinstance(original.func, cst.Call)
        and _is_partial(original.func.func) and original.func.args
        and is_pmap(original.func.args[0].value, self.aliases)):
      named = self._arguments([*original.args, *original.func.args[1:]],
                              line)
      port = named and self._port(code_of(updated.args[0].value),
                                  named, line)
      return cst.parse_expression(port) if port else updated
    if name.endswith(("nnx.pmap", "filter_pmap")):
      self.findings.append(Finding(line, Kind.PERSON, (
          f"{name}: flax NNX and equinox map their own state; port it to "
          "nnx.shard_map under nnx.jit or eqx.filter_jit over "
          "jax.shard_map by hand (the guide's examples/nnx_mlp and "
          "examples/equinox_mlp; a file whose pmaps are all theirs is "
          "ported)")))
    if name in stacked_calls.REMOVED_PUTS:
      self.uses_put = True
      helper = stacked_calls.REMOVED_PUTS[name]
      self.findings += [Finding(line, Kind.CHANGED, stacked_calls.removed(name),
                                Subject.REMOVED_CALL),
                        Finding(line, Kind.KEPT, stacked_calls.kept(helper))]
      return updated.with_changes(func=cst.Name(helper))
    if stacked_calls.keeps_stack(name, tail):
      self.findings.append(Finding(line, Kind.KEPT, stacked_calls.kept(name)))
    return updated

  def _collective(self, call, tail, line):
    axis = next((a.value for a in call.args
                 if a.keyword and a.keyword.value == "axis_name"), None)
    if axis is None and len(call.args) > (0 if tail == "axis_index" else 1):
      axis = call.args[0 if tail == "axis_index" else 1].value
    if isinstance(axis, cst.SimpleString):
      self._collective_axes.append((line, axis.evaluated_value, tail))

  def visit_Module(self, node):
    self._collective_axes = []
    self._strings = pmap_arguments.module_strings(node, self._path)
    return True

  def leave_FunctionDef(self, original, updated):
    kept, ports = [], []
    line = self._line(original)
    for decorator, before in zip(updated.decorators, original.decorators):
      expr = decorator.decorator
      line = self._line(before)
      if is_pmap(expr, self.aliases):
        ports.append({})
      elif (isinstance(expr, cst.Call) and _is_partial(expr.func)
            and expr.args and is_pmap(expr.args[0].value, self.aliases)):
        named = self._arguments(
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
      self.findings.append(Finding(line, Kind.PERSON, "a pmap decorator beside "
                                   "other decorators: their order decides "
                                   "what is mapped"))
      return updated
    name = updated.name.value
    port = self._port(name, {"fun": cst.Name(name), **ports[0]}, line)
    if port is None:
      return updated
    if self._module_level(original):
      self._bound(len(self.ports) - 1, name)
    self._decorated.append((name, port))
    return cst.FlattenSentinel([
        updated.with_changes(decorators=[]),
        cst.parse_statement(f"{name} = {port}\n").with_changes(
            leading_lines=[cst.EmptyLine()])])

  def _module_level(self, node) -> bool:
    return isinstance(self.get_metadata(metadata.ScopeProvider, node, None),
                      metadata.GlobalScope)

  def _bound(self, first: int, name: str) -> None:
    """The ports made since `first`, recorded as bound to `name` (the
    written module's name for them: `records.Port.name`)."""
    self.ports[first:] = [dataclasses.replace(p, name=name)
                          for p in self.ports[first:]]

  def visit_Assign(self, node):
    self._assigned.append(len(self.ports))
    return True

  def leave_Assign(self, original, updated):
    first = self._assigned.pop()
    # Bound only where the value is the pmap itself (not a dict or a call
    # holding one): the written module's name is then the step's.
    if (len(original.targets) == 1 and len(self.ports) == first + 1
        and isinstance(original.targets[0].target, cst.Name)
        and self._builds_pmap(original.value)
        and self._module_level(original)):
      self._bound(first, original.targets[0].target.value)
    return updated

  def leave_Module(self, original, updated):
    if "*" not in self.axes:
      for line, axis, tail in self._collective_axes:
        if axis not in self.axes:
          self.findings.append(Finding(line, Kind.PERSON, (
              f"{tail} over {axis!r}, an axis no pmap of this file names: "
              "give it the mesh axis it runs under")))
    return updated
