"""A file of `nnx.pmap` / `eqx.filter_pmap`, rewritten whole.

In: the parsed module, its uses of those pmaps (`read.other_pmaps`) and
the mode. Out: its `Rewrite`: the steps ported (`other_pmaps_write`), the
module-level mesh per axis (every process's devices in process order,
pmap's axis index) and equinox's `filter_shard_map` after the imports,
and with `--global` each mapped argument made the global batch it is where
the step is called:

    train_step(model, optimizer, x, y)  # x: [devices, rows, ...]
    ->
    train_step(model, optimizer, jax.tree.map(lambda a:
        jax.make_array_from_process_local_data(batch_sharding,
        a.reshape(-1, *a.shape[2:])), x), ...)

each process's stacked rows, flattened, as its rows of the global batch
(so the body's view is pmap's: its device's rows). Where the second step
cannot be read (an output mapped per device, a step passed on as a value
or called with keywords, several axes) the file gets the first step and a
finding per place (exit 1), as `--global` does for jax.pmap.
"""

import libcst as cst
from libcst import metadata

from compare._src.rewrite import records
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.read.names import dotted
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject
from compare._src.rewrite.write import global_written
from compare._src.rewrite.write import imports
from compare._src.rewrite.write import other_pmaps_write

# A mapped argument at a call site of the global step: this process's
# stacked `[local devices, rows, ...]` as its rows of the global batch
# (`make_array_from_process_local_data` takes a tree of them).
GLOBAL_ROWS = ("jax.make_array_from_process_local_data({sharding}, "
               "jax.tree.map(\n{indent}    lambda a: a.reshape(-1, "
               "*a.shape[2:]), {arg}))")


class _Names(cst.CSTVisitor):
  """Every name the module uses, its functions' positional arity, and the
  line where it joins `jax.distributed` (0: nowhere)."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,)

  def __init__(self):
    self.used, self.arity, self.joins = set(), {}, 0

  def visit_Call(self, node):
    if dotted(node.func) == "jax.distributed.initialize" and not self.joins:
      self.joins = self.get_metadata(metadata.PositionProvider,
                                     node).start.line

  def visit_Name(self, node):
    self.used.add(node.value)

  def visit_FunctionDef(self, node):
    star = node.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT)
    if not star:
      self.arity[node.name.value] = len(node.params.params)


def rewrite(module: cst.Module, path: str, uses, global_step: bool
            ) -> records.Rewrite:
  """The `Rewrite` of a module whose pmaps are `uses` (`OtherPmap`s)."""
  del path  # the findings name lines; the report names the file
  names = _Names()
  metadata.MetadataWrapper(module).visit(names)
  if names.joins:
    return records.Rewrite(module.code, (Finding(names.joins, Kind.PERSON, (
        "the program joins jax.distributed here: the port's mesh is built "
        "at import, before the join (its devices would be this process's "
        "alone, and jax could not join after); port it by hand with the "
        "mesh made after the join (docs/MANY-HOSTS.md)")),))
  free = lambda pool: next(n for n in pool if n not in names.used)
  bound = {"mesh": free(("mesh", "device_mesh", "pmap_axis_mesh")),
           "helper": free(other_pmaps_write.HELPER_NAMES), "meshes": {},
           "batch": free(("batch_sharding", "rows_sharding"))}
  writer = other_pmaps_write.OtherPmapWriter(uses, bound, global_step,
                                             names.arity)
  wrapper = metadata.MetadataWrapper(module)
  new = wrapper.visit(writer)
  findings = list(writer.findings)
  if global_step and (writer.steps or writer.unbound):
    # Read on the input (its lines), written on the ported module.
    sites = _CallSites(writer.steps, bound)
    metadata.MetadataWrapper(module).visit(sites)
    placed = metadata.MetadataWrapper(new).visit(_CallSites(writer.steps,
                                                            bound))
    refused = sites.refusals(set(writer.axes), writer.unbound)
    if refused:  # the first step, and why not the second
      first = rewrite(module, "", uses, global_step=False)
      return records.Rewrite(first.code, tuple(sorted(
          first.findings + tuple(refused), key=lambda f: f.line)))
    new, findings = placed, findings + sites.findings
  elif writer.steps:  # the first step: each call site keeps pmap's layout
    sites = _CallSites(writer.steps, bound, first_step=True)
    metadata.MetadataWrapper(module).visit(sites)
    findings += sites.findings
  seen = {f.line for f in findings}
  findings += [Finding(use.line, Kind.PERSON, (
      f"{use.name} used as a value (not called or a decorator): port it "
      "by hand")) for use in uses if use.line not in seen]
  if not writer.libraries:  # no step ported: a removed call may be
    return records.Rewrite(imports.with_mesh(new.code, module, "", False)
                           if new.code != module.code else module.code,
                           tuple(sorted(findings, key=lambda f: f.line)))
  return records.Rewrite(_with_head(new.code, module, writer, bound,
                                    global_step),
                         tuple(sorted(findings, key=lambda f: f.line)),
                         other_library=True)


def _with_head(code, module, writer, bound, global_step) -> str:
  """`code` with the imports it names, the meshes and equinox's helper."""
  block = []
  for prefix, library in writer.libraries.items():
    if prefix == library:  # the pmap was imported by name
      code = _with_import(code, f"import {library}")
  for axis, name in bound["meshes"].items():
    block.append(global_written.mesh_block(f'"{axis}"', {"mesh": name}))
  if global_step and writer.steps:
    axis = next(iter(bound["meshes"]))
    block.append(f"{bound['batch']} = jax.NamedSharding("
                 f"{bound['meshes'][axis]}, jax.P(\"{axis}\"))\n")
  equinox = [p for p, lib in writer.libraries.items()
             if lib == other_pmaps_write.EQUINOX]
  if equinox:
    block.append("\n" + other_pmaps_write.HELPER.format(
        helper=bound["helper"], lib=equinox[0]))
  return imports.with_mesh(code, module, "".join(block),
                           functools=bool(equinox))


def _with_import(code: str, line: str) -> str:
  """`code` with `line` after its last top-level import."""
  lines = code.splitlines(keepends=True)
  last = max((i + 1 for i, text in enumerate(lines)
              if text.startswith(("import ", "from "))), default=0)
  return "".join(lines[:last] + [line + "\n"] + lines[last:])


class _CallSites(cst.CSTTransformer):
  """Each call of a ported step: its mapped arguments made global batches
  of rows (or, `first_step`, a finding that they keep pmap's layout);
  `refusals` says where the second step cannot be read."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,)

  def __init__(self, steps, bound, first_step: bool = False):
    super().__init__()
    self._steps, self._bound, self._first = steps, bound, first_step
    self.findings, self._blocked = [], []
    self._called = set()
    self._funcs = set()  # ids of the Name nodes called

  def _line(self, node):
    """Where `node` starts."""
    return self.get_metadata(metadata.PositionProvider, node).start.line

  def visit_Call(self, node):
    if isinstance(node.func, cst.Name):
      self._funcs.add(id(node.func))
    return True

  def visit_FunctionDef(self, node):
    self._funcs.add(id(node.name))  # its definition names it
    return True

  def visit_AssignTarget(self, node):
    self._funcs.add(id(node.target))  # where the step is bound
    return True

  def visit_Name(self, node):
    if node.value in self._steps and id(node) not in self._funcs:
      self._blocked.append((self._line(node), (
          f"{node.value} is read here as a value, not called: the global "
          "layout of its arguments is not in view")))

  def leave_Call(self, original, updated):
    name = dotted(original.func)
    if name not in self._steps:
      return updated
    step, _ = self._steps[name]
    line = self._line(original)
    self._called.add(name)
    if any(a.keyword is not None or a.star for a in original.args):
      if self._first:  # the port's specs are positional
        self.findings.append(Finding(line, Kind.PERSON, (
            f"{name} is called with keyword or starred arguments: the "
            "port's in_specs name its positional arguments (nnx.shard_map "
            "fails on this call, equinox's filter_shard_map takes none); "
            "pass them by position")))
      self._blocked.append((line, (
          f"{name} is called with keyword or starred arguments: the "
          "global step places positional ones")))
      return updated
    mapped = step.mapped(len(original.args))
    if not any(mapped):
      return updated
    at = [i for i, m in enumerate(mapped) if m]
    if self._first:
      self.findings.append(Finding(line, Kind.KEPT, (
          f"{name}(...): argument(s) {at} keep pmap's stacked [devices, "
          "...] layout")))
      return updated
    indent = "    "  # LibCST adds the statement's own indentation
    args = [GLOBAL_ROWS.format(sharding=self._bound["batch"], indent=indent,
                               arg=code_of(a.value)) if m
            else code_of(a.value) for a, m in zip(updated.args, mapped)]
    self.findings.append(Finding(line, Kind.CHANGED, (
        f"{name}(...): argument(s) {at} "
        "made global batches where the step is called (each process's "
        "stacked [devices, rows, ...] flattened into its rows), the body "
        "as written"), Subject.CALL_SITE))
    lines = []  # a global batch on its own line, the rest together
    for i, (arg, m) in enumerate(zip(args, mapped)):
      if lines and not m and not mapped[i - 1]:
        lines[-1] += f", {arg}"
      else:
        lines.append(arg)
    return cst.parse_expression(f"{code_of(updated.func)}(\n{indent}"
                                + f",\n{indent}".join(lines) + ")")

  def refusals(self, axes, unbound) -> list[Finding]:
    """The places the second step cannot take, as findings: `axes` the
    pmaps name, `unbound` the lines of pmaps bound to no name."""
    blocked = list(self._blocked) + [(line, (
        "a pmap bound to no name here (returned, passed on, or called "
        "where it is made): its callers' layouts are not in view"))
                                     for line in unbound]
    for name, (step, line) in self._steps.items():
      outs = step.out_axes if isinstance(step.out_axes, tuple) else (
          step.out_axes,)
      if 0 in outs:
        blocked.append((line, (
            f"{name} returns an output mapped over the devices (out_axes "
            "0): its readers take it per device")))
      if name not in self._called:
        blocked.append((line, f"{name} is never called in this file: its "
                        "callers' layouts are not in view"))
    if len(axes) > 1:
      blocked.append((min(line for _, line in self._steps.values()), (
          f"the pmaps name {len(axes)} axes: the global batches are "
          "placed on one")))
    return [Finding(line, Kind.PERSON, f"global step not written: {text}",
                    Subject.NOT_GLOBAL) for line, text in blocked]
