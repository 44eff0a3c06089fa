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
`PmapRewriter` is the first step's writer: the file's pmaps (`PmapSites`)
each written with `helper_template` over pmap's stacked layout
(`stacked_specs`); the global step writes the same template with its
layouts' specs where it keeps the helpers (`global_rewriter`).
"""

import functools

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import pmap_arguments
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject
from compare._src.rewrite.write import pmap_sites

FUN = pmap_sites.FUN


def _specs(axes, axis_code: str) -> str:
  if axes is None:
    return "jax.P()"
  if axes == 0:
    return f"jax.P({axis_code})"
  inner = ", ".join(_specs(a, axis_code) for a in axes)
  return f"({inner},)" if len(axes) == 1 else f"({inner})"


def stacked_specs(line, in_axes, out_axes, axis):
  """`(in_axes, out_axes, in_specs, out_specs)` of the port at `line`:
  pmap's stacked layout."""
  del line
  return in_axes, out_axes, _specs(in_axes, axis), _specs(out_axes, axis)


def helper_template(written, layout_of, named, line, column=0):
  """`(its layout as `records.Port`'s fields, the jit(shard_map(...))
  source for pmap(fun, **named) with `FUN` for the function)`, or None;
  what it writes recorded in `written` (`pmap_sites.Written`). `layout_of`:
  `(line, in_axes, out_axes, axis) -> (in_axes, out_axes, in_specs,
  out_specs)`, the step's layout of the port at `line`."""
  del column  # the helpers' template is written the same at any column
  fun_code = FUN
  axis = (code_of(named["axis_name"]) if "axis_name" in named
          else '"devices"')
  written.unnamed |= "axis_name" not in named
  try:
    literal = pmap_arguments.axes_literal
    in_axes = literal(named["in_axes"]) if "in_axes" in named else 0
    out_axes = (literal(named["out_axes"]) if "out_axes" in named
                else 0)
  except ValueError as err:
    written.findings.append(Finding(line, Kind.PERSON, (
        f"in_axes/out_axes: {err}; the specs must be known here")))
    return None
  static = ()
  if "static_broadcasted_argnums" in named:
    try:
      static = pmap_arguments.argnums(named["static_broadcasted_argnums"])
    except ValueError as err:
      written.findings.append(Finding(line, Kind.PERSON, (
          f"static_broadcasted_argnums: {err}; jit needs them here")))
      return None
    if isinstance(in_axes, tuple):
      in_axes = tuple(a for i, a in enumerate(in_axes) if i not in static)
  mesh = (f"_pmap_mesh({axis}, tuple({code_of(named['devices'])}))"
          if "devices" in named else f"_pmap_mesh({axis})")
  donate = (f", donate_argnums={code_of(named['donate_argnums'])}"
            if "donate_argnums" in named else "")
  in_axes, out_axes, in_code, out_code = layout_of(line, in_axes, out_axes,
                                                   axis)
  layout = {"in_axes": in_axes, "out_axes": out_axes,
            "in_specs": f"({in_code}, jax.P({axis}))",
            "out_specs": out_code, "static": static,
            "devices": (code_of(named["devices"]) if "devices" in named
                        else None)}
  written.changed += 1
  written.uses_static = written.uses_static or bool(static)
  written.findings.append(Finding(line, Kind.CHANGED, (
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
    return layout, (
        f"_pmap_call(lambda fun: jax.jit(\n"
        f"{pad}_pmap_keywords(jax.shard_map(\n"
        f"{pad}    _pmap_view(fun, in_axes={in_axes!r}, "
        f"out_axes={out_axes!r}),\n{pad}    mesh={mesh},\n"
        f"{specs}{pad}    check_vma=False)){donate}),\n{called}")
  specs = specs.replace(f"{pad}    ", f"{pad}        ")
  return layout, (
      f"_pmap_call(lambda fun: jax.jit(\n{pad}_pmap_static(\n"
      f"{pad}    lambda fn: jax.shard_map(\n"
      f"{pad}        _pmap_view(fn, in_axes={in_axes!r}, "
      f"out_axes={out_axes!r}),\n{pad}        mesh={mesh},\n"
      f"{specs}{pad}        check_vma=False),\n"
      f"{pad}    fun, {static!r}),\n"
      f"{pad}static_argnums={static!r}{donate}),\n{called}")


class PmapRewriter(cst.CSTTransformer):
  """The first step: rewrites every pmap it can; `written` records a
  `Finding` for each, and a `records.Port` for each pmap written."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,
                           metadata.ScopeProvider)

  def __init__(self, aliases, path: str | None = None):
    """`path`: where imported axis constants are read from."""
    super().__init__()
    self.written = pmap_sites.Written()
    self.sites = pmap_sites.PmapSites(
        aliases, path, self.get_metadata, functools.partial(
            helper_template, self.written, stacked_specs), self.written)

  def visit_Module(self, node):
    self.sites.visit_module(node)
    return True

  def visit_Call(self, node):
    self.sites.visit_call(node)
    return True

  def leave_Call(self, original, updated):
    return self.sites.leave_call(original, updated)

  def leave_FunctionDef(self, original, updated):
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
