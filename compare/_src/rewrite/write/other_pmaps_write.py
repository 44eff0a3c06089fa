"""flax NNX's `nnx.pmap` and equinox's `eqx.filter_pmap`, ported.

In: a module with no `jax.pmap` and the uses of those pmaps
(`read.other_pmaps`). Out: the module's `Rewrite`. Each pmap becomes what
its library runs on a mesh, over a module-level 1-D mesh of every device
named as pmap's axis:

    @nnx.pmap(axis_name="batch", in_axes=(None, 0), out_axes=None)
    ->
    @nnx.jit
    @nnx.shard_map(mesh=mesh, in_specs=(jax.P(), jax.P("batch")),
                   out_specs=jax.P(), check_vma=False)

and `eqx.filter_pmap(...)` -> `eqx.filter_jit` over `filter_shard_map`, a
module-level function the file gets once: `jax.shard_map` over the arrays
of the step's arguments and results, the rest (an MLP's activation
functions) held out and put back, as `filter_pmap` holds them (equinox
0.13.8 has no shard_map of its own; `jax.shard_map` takes arrays only).

`in_axes`/`out_axes` None -> `P()`, 0 -> `P(axis)`. `check_vma=False` is how
pmap runs: with jax's check on, the gradient of a `P()` argument arrives
summed over the mesh and the body's own `pmean` would leave N times it (the
gradient trap). The first step keeps pmap's call sites: a mapped argument
is still the stacked `[devices, ...]` array, and the body takes its
device's block without the axis of 1 (`x = jax.tree.map(lambda a: a[0],
x)`, pmap's per-device view), an output mapped with 0 gets it back.
`--global` (`other_pmaps_global`) leaves the body as written and makes each
mapped argument the global batch of rows it is, where the step is called.

What changes a layout in a way not read here (`nnx.StateAxes`,
`nnx.split_rngs`, static arguments, given devices, an axis other than 0) is
left as written with a finding naming its line.
"""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import other_pmap_args
from compare._src.rewrite.read import stacked_calls
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.read.names import dotted
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject
from compare._src.rewrite.write import global_written

NNX, EQUINOX = other_pmap_args.NNX, other_pmap_args.EQUINOX
# What each library's pmap becomes: the jit and the shard_map, by the name
# the file gives the library (`{lib}`) and the helper's (`{helper}`).
_JIT = {NNX: "{lib}.jit", EQUINOX: "{lib}.filter_jit"}
_JIT_DONATE = {NNX: "donate_argnums", EQUINOX: "donate"}
HELPER_NAMES = ("filter_shard_map", "eqx_shard_map", "shard_map_arrays")
HELPER = '''
def {helper}(fun, *, mesh, in_specs, out_specs):
  """`jax.shard_map` of `fun` over the arrays of its arguments and results
  (`check_vma=False`, as pmap runs); every other leaf (an activation
  function, a flag) is held out and put back, as `{lib}.filter_pmap` holds
  it: `jax.shard_map` takes arrays only."""

  def mapped(*args):
    arrays, static = {lib}.partition(args, {lib}.is_array)
    out_static = None

    def body(arrays):
      nonlocal out_static
      out = fun(*{lib}.combine(arrays, static))
      out_arrays, out_static = {lib}.partition(out, {lib}.is_array)
      return out_arrays

    out = jax.shard_map(body, mesh=mesh, in_specs=(in_specs,),
                        out_specs=out_specs, check_vma=False)(arrays)
    return {lib}.combine(out, out_static)

  return mapped
'''


def other_pmaps_prefix(use) -> str:
  """The file's name for the library of an `OtherPmap`."""
  return library_prefix(use.name, use.library)


def library_prefix(name: str, library: str) -> str:
  """How the file names the library of the pmap `name` (`nnx.pmap` ->
  `nnx`); the module's full name where the pmap was imported by name."""
  return name.rsplit(".", 1)[0] if "." in name else library


def _arrays_only(code: str, prefix: str) -> str:
  """`code` with pmap's per-device view taken of arrays only, as
  `filter_pmap` maps them: an equinox module's other leaves (functions,
  flags) pass as they are (`prefix`: the file's name for equinox)."""
  is_array = f" if {prefix}.is_array(a) else a,"
  return code.replace(
      "jax.tree.map(lambda a: a[0],",
      f"jax.tree.map(lambda a: a[0]{is_array}").replace(
          "jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0),",
          f"jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0){is_array}")


class OtherPmapWriter(cst.CSTTransformer):
  """Ports every `nnx.pmap` / `eqx.filter_pmap` it can; a `Finding` each.

  Attributes:
    findings: one per pmap: changed, or left to a person and why.
    steps: the name each ported step is bound to -> (`OtherStep`, line).
    libraries: the libraries whose pmaps were ported, by prefix.
    axes: each ported pmap's axis.
    unbound: the lines of ported pmaps bound to no name (`--global`
      cannot follow their callers).
  """

  METADATA_DEPENDENCIES = (metadata.PositionProvider,)

  def __init__(self, uses, bound: dict, global_step: bool, arity: dict):
    super().__init__()
    self._arities = arity  # a function of the file -> its parameters
    self._pmap_name = ""  # the pmap being written, as the file names it
    self._pmaps = {use.name: use.library for use in uses if use.library}
    # The file's name for each library: equinox's filters arrays.
    self._libraries_seen = {other_pmaps_prefix(use): use.library
                            for use in uses if use.library}
    self._bound = bound  # "mesh", "helper": the module-level names
    self._global = global_step
    self.findings, self.steps, self.libraries = [], {}, {}
    self.axes, self.unbound = [], []
    self._decorators = set()  # ids of the pmap decorators' nodes
    self._assigned = {}  # id of a pmap call -> the name it is bound to

  def _line(self, node) -> int:
    """Where `node` starts."""
    return self.get_metadata(metadata.PositionProvider, node).start.line

  def _pmap_of(self, node):
    """(name, library) where `node` is a ported library's pmap, or
    (name, library) of its call's function; else None."""
    name = dotted(node.func if isinstance(node, cst.Call) else node)
    return (name, self._pmaps[name]) if name in self._pmaps else None

  def _person(self, line, text):
    """A place left as written, and why."""
    self.findings.append(Finding(line, Kind.PERSON, text))

  def _step(self, node, line):
    """The `OtherStep` of a pmap node (a call or a bare name), or None
    with a finding."""
    name, library = self._pmap_of(node)
    self._pmap_name = name
    step = other_pmap_args.read(node if isinstance(node, cst.Call) else None,
                                library, line, name)
    if isinstance(step, str):
      self._person(line, step)
      return None
    return step

  def _ported(self, step, prefix, line, bound_to):
    """The finding of a ported pmap, and its step recorded by name."""
    jit = _JIT[step.library].format(lib=prefix)
    self.libraries[prefix] = step.library
    self.axes.append(step.axis)
    self.findings.append(Finding(line, Kind.CHANGED, (
        f"{prefix}.{'pmap' if step.library == NNX else 'filter_pmap'} -> "
        f"{jit} over a shard_map on a 1-D mesh '{step.axis}' of every "
        f"device: in_specs {step.spec(step.in_axes)}, out_specs "
        f"{step.spec(step.out_axes)}, check_vma=False as pmap runs"
        + ("" if self._global else "; call sites keep pmap's stacked "
           "[devices, ...] arguments (the body takes its device's block)")),
                                 Subject.PMAP))
    if bound_to is not None:
      self.steps[bound_to] = (step, line)
    else:
      self.unbound.append(line)

  def _jit_and_map(self, step, prefix):
    """The jit's source, and the shard_map's head and arguments (the
    function first where one is given), by library."""
    jit = _JIT[step.library].format(lib=prefix)
    parts = [f"mesh={self._mesh(step.axis)}",
             f"in_specs={step.spec(step.in_axes)}",
             f"out_specs={step.spec(step.out_axes)}"]
    if step.library == NNX:
      return jit, f"{prefix}.shard_map", parts + ["check_vma=False"]
    return jit, self._bound["helper"], parts  # the helper sets check_vma

  def _donation(self, step) -> str:
    """The jit's donation keyword, as the pmap wrote it, or ""."""
    if step.donate is None:
      return ""
    return f"{_JIT_DONATE[step.library]}={code_of(step.donate.value)}"

  def _mesh(self, axis: str) -> str:
    """The module-level mesh of `axis`: the first axis's takes the free
    mesh name, each other axis that name and the axis."""
    meshes = self._bound["meshes"]
    if axis not in meshes:
      base = self._bound["mesh"]
      meshes[axis] = base if not meshes else (
          f"{base}_{''.join(c if c.isalnum() else '_' for c in axis)}")
    return meshes[axis]

  def visit_FunctionDef(self, node):
    for decorator in node.decorators:
      if self._pmap_of(decorator.decorator):
        self._decorators.add(id(decorator.decorator))
    return True

  def visit_Assign(self, node):
    if len(node.targets) == 1 and isinstance(node.targets[0].target,
                                             cst.Name):
      self._assigned[id(node.value)] = node.targets[0].target.value
    return True

  def leave_FunctionDef(self, original, updated):
    at = [i for i, d in enumerate(original.decorators)
          if id(d.decorator) in self._decorators]
    if len(at) != 1:
      return updated
    node = original.decorators[at[0]].decorator
    line = self._line(original.decorators[at[0]])
    rngs = other_pmap_args.split_rngs_line(
        original.decorators, lambda n: self.get_metadata(
            metadata.PositionProvider, n))
    if rngs is not None:
      self._person(line, (
          f"nnx.split_rngs (line {rngs}) gives each device its own key "
          "under nnx.pmap: under nnx.shard_map the split keys come as "
          "blocks that keep their axis; port it by hand "
          "(docs/MORE-IDIOMS.md#nnx)"))
      return updated
    step = self._step(node, line)
    if step is None:
      return updated
    fn = self._viewed(updated, step, line)
    if fn is None:
      return updated
    prefix = library_prefix(self._pmap_of(node)[0], step.library)
    jit, shard_map, parts = self._jit_and_map(step, prefix)
    donation = self._donation(step)
    if donation:
      jit += f"({donation})"
    if step.library == NNX:
      mapper = global_written.wrapped(shard_map, parts, "    ", 78)
    else:
      mapper = global_written.wrapped("functools.partial",
                                      [shard_map, *parts], "    ", 78)
    new = [cst.Decorator(cst.parse_expression(jit)),
           cst.Decorator(cst.parse_expression(mapper))]
    decorators = list(updated.decorators)
    decorators[at[0]:at[0] + 1] = new
    self._ported(step, prefix, line, original.name.value)
    return fn.with_changes(decorators=decorators)

  def _viewed(self, fn, step, line):
    """`fn` with pmap's per-device view in its body (the first step), or
    None with a finding where its parameters or returns cannot say."""
    params = fn.params.params
    if isinstance(step.in_axes, tuple) and (
        len(step.in_axes) != len(params) or fn.params.star_arg
        not in (None, cst.MaybeSentinel.DEFAULT)):
      self._person(line, (
          f"in_axes has {len(step.in_axes)} axes, {fn.name.value} "
          f"{len(params)} positional parameters: port it by hand"))
      return None
    if self._global:
      return fn
    taken = [i for i, m in enumerate(step.mapped(len(params))) if m]
    outs = step.out_axes
    given = ([None] if outs == 0 else [j for j, a in enumerate(outs) if a == 0]
             if isinstance(outs, tuple) else [])
    viewed = global_written.per_device(fn, taken, given)
    if viewed is None:
      self._person(line, (
          f"{fn.name.value} returns an output mapped over the devices "
          "(out_axes 0) from more than one return, or not as a tuple: "
          "pmap stacks it per device; port it by hand"))
      return None
    if step.library == NNX:
      return viewed
    prefix = library_prefix(self._pmap_name, step.library)
    return cst.parse_statement(_arrays_only(code_of(viewed), prefix))

  def leave_Call(self, original, updated):
    if dotted(original.func) in stacked_calls.REMOVED_PUTS:
      return self._removed_put(original, updated)
    if id(original) in self._decorators or not self._pmap_of(original):
      return updated
    line = self._line(original)
    step = self._step(original, line)
    if step is None:
      return updated
    name = self._pmap_of(original)[0]
    if step.fun is None:
      self._person(line, (f"{name}(...) without the function (line {line}): "
                          "port it by hand"))
      return updated
    fun = self._call_view(step, line)
    if fun is None:
      return updated
    prefix = library_prefix(name, step.library)
    jit, shard_map, parts = self._jit_and_map(step, prefix)
    donation = self._donation(step)
    mapped = global_written.wrapped(shard_map, [fun, *parts], "    ", 78)
    code = f"{jit}({mapped}" + (f", {donation})" if donation else ")")
    self._ported(step, prefix, line, self._assigned.get(id(original)))
    return cst.parse_expression(code)

  def _removed_put(self, original, updated):
    """`jax.device_put_replicated(x, devices)` (removed in jax 0.10): the
    same stacked copies, one per device, of `x`'s arrays (an equinox
    module's other leaves as they are); the step's jit places them."""
    line, name = self._line(original), dotted(original.func)
    args = updated.args
    if (name != "jax.device_put_replicated" or len(args) != 2
        or any(a.keyword or a.star for a in args)):
      self._person(line, (f"{name} (removed in jax 0.10) here: stack the "
                          "copies by hand (docs/MIGRATION.md#staged)"))
      return updated
    value, devices = code_of(args[0].value), code_of(args[1].value)
    equinox = [p for p, lib in self._libraries_seen.items() if lib == EQUINOX]
    keep = f" if {equinox[0]}.is_array(a) else a" if equinox else ""
    self.findings.append(Finding(line, Kind.CHANGED, (
        f"{stacked_calls.REMOVED} {name}(...) -> the same stacked copies, "
        "one per device (jax.numpy.stack), placed by the step's jit"),
                                 Subject.REMOVED_CALL))
    return cst.parse_expression(
        f"jax.tree.map(\n    lambda a: jax.numpy.stack([a] * len({devices}))"
        f"{keep},\n    {value})")

  def _call_view(self, step, line) -> str | None:
    """The function a called pmap maps, as shard_map takes it: as written,
    or (the first step) a lambda giving it pmap's per-device view; None
    with a finding where its arity cannot be read."""
    fun = code_of(step.fun)
    outs = step.out_axes
    if isinstance(outs, tuple) and 0 in outs and not self._global:
      self._person(line, (
          "a called pmap with out_axes mapping some outputs only: pmap "
          "stacks those per device; decorate the function, or port it by "
          "hand"))
      return None
    count = (len(step.in_axes) if isinstance(step.in_axes, tuple)
             else self._arity(step.fun))
    mapped = step.mapped(count or 0)
    if self._global or (not any(mapped) and outs != 0):
      return fun
    if count is None:
      self._person(line, (
          f"{fun} is mapped with in_axes={step.in_axes!r} but its "
          "parameters are not in this file: give in_axes one axis per "
          "argument, or port it by hand"))
      return None
    params = [f"a{i}" for i in range(count)]
    args = [global_written.UNSTACK.format(p) if m else p
            for p, m in zip(params, mapped)]
    # One argument a line (LibCST indents them under the statement).
    indent = " " * (12 if outs == 0 else 8)
    body = f"{fun}(\n" + ",\n".join(indent + a for a in args) + ")"
    if outs == 0:
      body = (global_written.STACK.split("{}")[0].rstrip() + "\n        "
              + body + ")")
    view = f"lambda {', '.join(params)}: {body}"
    if step.library == NNX:
      return view
    return _arrays_only(view, library_prefix(self._pmap_name, step.library))

  def _arity(self, fun) -> int | None:
    """How many positional arguments `fun` takes: a function of this file,
    or a `functools.partial` of one (less the arguments it binds)."""
    if isinstance(fun, cst.Name):
      return self._arities.get(fun.value)
    if (isinstance(fun, cst.Call) and dotted(fun.func) in (
        "functools.partial", "partial") and fun.args
        and isinstance(fun.args[0].value, cst.Name)
        and not any(a.star for a in fun.args)):
      count = self._arities.get(fun.args[0].value.value)
      return None if count is None else count - (len(fun.args) - 1)
    return None
