"""`python -m compare.rewrite --global`: the second step, to global arrays.

The first step (`compare._src.rewrite.rewrite_pmap`) keeps pmap's stacked
`[devices, ...]` layout. This one places the state once on the mesh and each
batch as one global array, the step's per-device body unchanged:

- `replicate(x)` -> `jax.device_put(x, NamedSharding(mesh, P()))`;
- `common_utils.shard(x)` (or the tutorial's reshape to `[devices, ...]`)
  -> `jax.make_array_from_process_local_data(NamedSharding(mesh, P(axis)),
  x)` (each process's rows of the global batch), and
  `prefetch_to_device(map(common_utils.shard, it), n)` -> each batch of `it`
  placed so;
- `unreplicate(x)` and `jax.tree.map(lambda y: y[0], x)` of a replicated
  value -> `x` (its `x[0]` is refused: a device's copy, or a tuple's
  element);
- each step's in_specs and out_specs from where its arguments come from and
  how its outputs are read (`compare._src.rewrite.global_layouts`): `P()` for a
  replicated value, `P(axis)` for a global batch, pmap's stacked layout kept
  for the rest (a key per device; outputs read per device).

Why the numbers stay pmap's: with `check_vma=False` a `P()` output keeps
each device's own copy, as pmap's stacked output did, and a read takes
device 0's, as `unreplicate` did. Where the reading cannot tell a layout, or
a value is read in a way the global layout changes, nothing of the global
step is written: the file gets the first step and the report names each
place and why (exit 1).
"""


import libcst as cst
from libcst import metadata

from compare._src.rewrite import first_step_undone
from compare._src.rewrite import global_declared
from compare._src.rewrite import global_idioms
from compare._src.rewrite import global_layouts
from compare._src.rewrite import global_tidy
from compare._src.rewrite import global_uncalled
from compare._src.rewrite import global_written
from compare._src.rewrite import rewrite_file
from compare._src.rewrite import rewrite_pmap
from compare._src.rewrite.global_layouts import B, R
from compare._src.rewrite.rewrite_pmap import Finding

_BATCH_AXIS = "batch-axis"
AXES = "the pmaps name "
# The Port's declared layout (`--prove`), named here as before.
Declared = global_declared.Declared
DECLARED = global_declared.DECLARED  # several axes, each a mesh: no call site moved


def _spec(kind, axis_code) -> str:
  return "jax.P()" if kind == R else f"jax.P({axis_code})"


class GlobalRewriter(rewrite_pmap.PmapRewriter):
  """The first step's rewriter with each step's global layout, and the
  placements and reads of the global step."""

  def __init__(self, aliases, steps, replace, axis_code, known,
               declared=None):
    super().__init__(aliases)
    self._steps = {s.line: s for s in steps.values()}
    self._replace, self._axis, self._known = replace, axis_code, known
    self._declared = declared
    self.blockers = []  # found while writing: the global step is not taken

  def _layout(self, line, in_axes, out_axes, axis):
    step = self._steps[line]
    given = (in_axes if isinstance(in_axes, tuple)
             else (in_axes,) * len(step.args))
    if step.name != self._declared:
      # A value the program replicated or sharded, given to an argument
      # pmap broadcasts: each device saw the whole stacked [devices, ...]
      # array, which the global placement no longer is.
      self.blockers += [global_layouts.Blocker(line, (
          f"argument {i} of {step.name} is {kind} (made by a "
          f"{'replicate' if kind == R else 'shard'} the second step "
          "rewrites) but the pmap broadcasts it (in_axes=None): each device "
          "saw the whole stacked [devices, ...] array; place it by hand"))
                        for i, (axis_in, kind) in enumerate(zip(given,
                                                                step.args))
                        if axis_in is None and kind in (R, B)]
    kinds = [None if axis_in is None else kind
             for axis_in, kind in zip(given, step.args)]
    stacked = [str(i) for i, k in enumerate(kinds) if k == global_layouts.S]
    if stacked:
      self.findings.append(Finding(line, "kept", (
          f"{step.name}'s argument(s) {', '.join(stacked)} keep pmap's "
          "stacked layout [devices, ...]: made by no replicate, shard or "
          "prefetch_to_device the second step knows (a key per device stays "
          "so; a state or batch stacked by hand is placed by hand: "
          "docs/MIGRATION.md#idiom-map)")))
    self.kinds = kinds  # the written step's specs (`global_plain`)
    in_axes = tuple(None if k in (R, B, None) else 0 for k in kinds)
    in_code = "(" + ", ".join(
        "jax.P()" if k in (R, None) else f"jax.P({axis})" for k in kinds
    ) + ("," if len(kinds) == 1 else "") + ")"
    outs = step.outs if step.outs is not None else global_layouts.S
    if isinstance(outs, list):
      given = (out_axes if isinstance(out_axes, tuple)
               else (out_axes,) * len(outs))
      outs = [None if a is None else k for a, k in zip(given, outs)]
      out_axes = tuple(None if k in (R, None) else 0 for k in outs)
      out_code = "(" + ", ".join(
          "jax.P()" if k in (R, None) else f"jax.P({axis})" for k in outs
      ) + ("," if len(outs) == 1 else "") + ")"
    else:
      out_axes = None if outs == R or out_axes is None else 0
      out_code = _spec(R if out_axes is None else B, axis)
    self.outs = outs if isinstance(outs, list) else [
        R if out_axes is None else global_layouts.S]
    self.one_out = not isinstance(outs, list)
    return in_axes, out_axes, in_code, out_code

  def _said(self, kind) -> str:
    """How the report names a placement's sharding of `kind`."""
    return f"NamedSharding(mesh, P({'' if kind == R else self._axis}))"

  def _sharding(self, kind) -> str:
    """The code of the named sharding a placement of `kind` names."""
    return (f"jax.NamedSharding(_pmap_mesh({self._axis}), "
            f"{_spec(kind, self._axis)})")

  def _placed(self, value, kind) -> cst.BaseExpression:
    # A batch is each process's own rows of the global batch; device_put
    # onto a sharding over every process's devices would take it as the
    # whole batch (and check that every process passed the same).
    sharding = self._sharding(kind)
    code = global_idioms.code_of(value)
    width = 79 - self._column
    return cst.parse_expression(global_written.wrapped(
        "jax.device_put", [code, sharding], "    ", width) if kind == R else
        global_written.wrapped("jax.make_array_from_process_local_data",
                               [sharding, code], "    ", width))

  def leave_Call(self, original, updated):
    line = self._line(original)
    # Where the call starts: a placement written there stays in 79 columns.
    self._column = self.get_metadata(metadata.PositionProvider,
                                     original).start.column
    name = rewrite_pmap.dotted(original.func)
    if global_idioms.is_replicate_call(original, self._known):
      self.findings.append(Finding(line, "changed", (
          f"{name}(...) -> jax.device_put(..., {self._said(R)}): "
          "the state placed once, no copy per device")))
      tree = updated.args[1 if name in global_idioms.TREE_MAPS else 0].value
      return self._placed(tree, R)
    if global_idioms.is_shard_call(original, self._known):
      self.findings.append(Finding(line, "changed", (
          f"{name}(...) -> jax.make_array_from_process_local_data("
          f"{self._said(B)}, ...): the global batch "
          "(each process's rows), split over the mesh, no reshape to "
          "[devices, ...]")))
      return self._placed(updated.args[0].value, B)
    if name.endswith("prefetch_to_device") and updated.args:
      return self._prefetched(name, line, updated.args[0].value)
    if id(original) in self._replace:
      self.findings.append(Finding(line, "changed", (
          f"{name}(...) of a replicated value -> the value itself")))
      return self._inner(original)
    return super().leave_Call(original, updated)

  def leave_Subscript(self, original, updated):
    # `loss[0]` of a value the step reduced over the axis, now `P()`.
    if id(original) in self._replace:
      self.findings.append(Finding(self._line(original), "changed", (
          f"{global_idioms.code_of(original)} of a value the step reduces "
          "over the axis (one value now, P()) -> "
          f"{global_idioms.code_of(self._replace[id(original)])}")))
      return self._inner(original)
    return updated

  def _prefetched(self, name, line, source):
    """`prefetch_to_device(source, n)` as a generator of global batches:
    `map(common_utils.shard, it)`'s `it` placed as it is; batches stacked
    elsewhere (flax imagenet's `prepare_tf_data`) unstacked first, their
    leading two axes merged, so each device holds pmap's rows."""
    sharding = self._sharding(B)
    if (isinstance(source, cst.Call) and rewrite_pmap.dotted(source.func)
        == "map" and len(source.args) == 2 and rewrite_pmap.dotted(
            source.args[0].value).endswith("common_utils.shard")):
      self.findings.append(Finding(line, "changed", (
          f"{name}(map(shard, ...)) -> each global batch placed with "
          f"{self._said(B)} as it is read")))
      return _generator(sharding, "_batch",
                        global_idioms.code_of(source.args[1].value))
    self.findings.append(Finding(line, "changed", (
        f"{name}(...) of batches stacked [devices, b, ...] -> each batch "
        f"merged to [devices * b, ...] (the same rows on each device) and "
        f"placed with {self._said(B)} as it is read")))
    return _generator(sharding, "jax.tree.map(lambda _x: _x.reshape((-1,) + "
                      "_x.shape[2:]), _batch)", global_idioms.code_of(source))

  def _inner(self, original):
    # The replaced node's inside, as rewritten (a read holds no pmap).
    return self._replace[id(original)].deep_clone()


def _generator(sharding, batch, source) -> cst.BaseExpression:
  """The global batches of `source`, each `batch` placed as it is read."""
  head = "jax.make_array_from_process_local_data"
  one = f"({head}({sharding}, {batch}) for _batch in {source})"
  if len(one) <= 66:
    return cst.parse_expression(one)
  return cst.parse_expression("(\n    " + global_written.wrapped(
      head, [sharding, batch], "        ", 72) + f"\n    for _batch in {source})")


def _axis_of(module, aliases, line, path):
  """The axis the placements name (its source), or None with a blocker at
  `line` (the first pmap's); and a finding where the pmaps name several.

  pmaps over several axes, none inside another (the first step refuses
  that), each map every local device: each step gets its own 1-D mesh of
  them, named as its pmap named its axis. A value placed on one of those
  meshes is laid out on the devices as on any other (jit takes it as it
  is), so the placements name one: the axis most pmaps name.
  """
  reader = rewrite_pmap.PmapRewriter(aliases, path)
  wrapper = metadata.MetadataWrapper(module)
  wrapper.visit(reader)
  axes = set(reader.axes) | ({"devices"} if reader.unnamed else set())
  if "*" in axes:
    return None, [global_layouts.Blocker(line, (
        "a pmap's axis_name is an expression, not a string: the global "
        "step writes the mesh's axis by name; give it the name"))], []
  named = reader.axes + ["devices"] * reader.unnamed
  axis = max(sorted(axes), key=named.count)
  if len(axes) == 1:
    return f"\"{axis}\"", [], []
  return f"\"{axis}\"", [], [Finding(line, "changed", (
      f"{AXES}{len(axes)} axes ({sorted(axes)}"
      + ("; 'devices' is a pmap's that names none" if reader.unnamed
         else "") + "), none inside another: each step a 1-D mesh of the "
      f"local devices named as its pmap's axis; placements on '{axis}''s "
      "(the same devices, in the same order)"))]


# Where a place names no page of the guide, the one a person follows to
# write the global step by hand.
_BY_HAND = "docs/MIGRATION.md#idiom-map"


def _place(text: str) -> str:
  """A place's finding: why, and the guide's page for it."""
  if "docs/" not in text:
    text += f" ({_BY_HAND})"
  return f"global step not written: {text}"


def rewrite_global_source(source: str, path: str = "<string>",
                          declared: "Declared | None" = None
                          ) -> rewrite_file.Rewrite:
  """Both steps of one source (a pmap program, or the first step's output):
  its pmaps to global arrays, or, where the global step cannot be taken,
  the first step and a finding per place.

  Args:
    source: the program's text.
    path: its name in the report.
    declared: the step the team's `compare.Port` declares (`--prove`),
      and its layout. A step this file never calls, or hands on as a
      value, takes that layout (its callers are out of view; the Port says
      what they pass).

  Raises:
    RewriteError: `source` is not Python, or has no pmap.
  """
  try:
    read_back = first_step_undone.undone(source)
  except first_step_undone.UndoError as err:
    raise rewrite_file.RewriteError(f"{path}: {err}") from None
  if read_back is not None:  # the first step's output: from its program
    both = rewrite_global_source(read_back, path, declared)
    line = first_step_undone.line_of(source, read_back)
    return rewrite_file.Rewrite(both.code, tuple(
        Finding(line(f.line), f.kind, f.text) for f in both.findings),
                                both.ports)
  whole = _both_steps(source, path, declared)
  if not any(f.kind == "person" and "global step" in f.text
             for f in whole.findings):
    return whole
  # Refused: each function never called that holds a pmap, set aside in
  # turn, where that alone lets the rest take the second step.
  for function in global_uncalled.uncalled(source):
    try:
      rest = _both_steps(global_uncalled.trimmed(source, [function]), path,
                         declared)
    except rewrite_file.RewriteError:
      continue
    if not any(f.kind == "person" and "global step" in f.text
               for f in rest.findings):
      return rewrite_file.Rewrite(
          global_uncalled.restored(rest.code, source, [function]),
          tuple(sorted(rest.findings + tuple(global_uncalled.findings(
              [function], source)), key=lambda f: f.line)), rest.ports)
  return whole


def _both_steps(source, path, declared) -> rewrite_file.Rewrite:
  """`rewrite_global_source` of a pmap program (not the first step's)."""
  first = rewrite_file.rewrite_source(source, path)
  if first.needs_a_person:
    return rewrite_file.Rewrite(first.code, first.findings + (Finding(
        min(f.line for f in first.findings if f.kind == "person"), "person",
        "the global step needs every pmap rewritten first: written is the "
        "first step"),), first.ports)
  if not first.ports:  # only calls jax 0.10 removed: their pmap is elsewhere
    return rewrite_file.Rewrite(first.code, first.findings + tuple(
        Finding(f.line, "person", _place(
            "no pmap in this file takes what this call places; move it with "
            "the step that does (docs/MIGRATION.md#staged)")) for f in first.findings if f.kind == "kept"),
                                first.ports)
  module = cst.parse_module(source)
  aliases = rewrite_file.pmap_aliases(module)
  axis, blockers, axes_finding = _axis_of(
      module, aliases, min((p.line for p in first.ports), default=1), path)
  rewriter = rewrite_pmap.PmapRewriter(aliases, path)
  wrapper = metadata.MetadataWrapper(module)
  steps, replace, known, found, shadowed, notes = global_layouts.read(
      wrapper, rewriter.builds_pmap, rewriter.is_pmap_decorator,
      declared and declared.name, global_written.reduced_by_line(
          wrapper, first.ports))
  blockers += found
  blockers += [global_layouts.Blocker(p.line, (
      "pmap over given devices: the global step builds its mesh from "
      "jax.local_devices()")) for p in first.ports
                if "_pmap_mesh(" in p.template and ", tuple(" in p.template
                and ", tuple(jax.local_devices()))" not in p.template]
  declared_findings = []
  for step in steps.values():
    ours = declared is not None and step.name == declared.name
    if (step.calls and ours and step.args
        and step.args != declared.mapped(step)):
      blockers.append(global_layouts.Blocker(step.calls[0], (
          f"{step.name} is called here with arguments {step.args}; the "
          f"Port declares {declared.mapped(step)}: call it so, or prove "
          "another step")))
    if step.calls:
      continue
    if ours:
      declared_findings += global_declared.as_declared(step, declared)
      continue
    blockers.append(global_layouts.Blocker(step.line, (
        f"{step.name} is never called in this file: its callers' layouts "
        "are not in view (--prove with the team's compare.Port declares "
        "them: the state replicated, the batch split by rows: "
        "docs/REWRITE.md#declared)")))
  named = {s.line for s in steps.values()} | shadowed
  for port in first.ports:
    if port.line in named:
      continue
    if (declared is not None and declared.line == port.line
        and "static_argnums" not in port.template):
      # The Port's step is this pmap, made in a function (a factory the
      # Port calls): its layout is the Port's.
      steps[declared.name] = global_layouts.StepLayout(port.line,
                                                       declared.name)
      declared_findings += global_declared.as_declared(steps[declared.name], declared)
      continue
    blockers.append(global_layouts.Blocker(port.line, (
        "a pmap bound to no name here (returned, passed on, or called "
        "where it is made): its callers' layouts are not in view; bind it "
        "to a name the file calls, or declare them with --prove (the "
        "team's compare.Port: docs/REWRITE.md#declared)")))
  if blockers:
    return rewrite_file.Rewrite(first.code, first.findings + tuple(
        Finding(b.line, "person", _place(b.text))
        for b in blockers), first.ports)
  from compare._src.rewrite import global_plain  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  written = global_plain.write(wrapper, module, first, steps, replace, axis,
                              known, declared, len(axes_finding), source,
                              aliases)
  if written is not None and not isinstance(written, str):
    code, writer = written
    code, removed = global_tidy.tidied(source, code)
    return rewrite_file.Rewrite(code, tuple(sorted(
        writer.findings + declared_findings + axes_finding + [
            Finding(line, "changed", text) for line, text in notes]
        + removed + global_tidy.findings(source, code, writer.ports, wrapper),
        key=lambda f: f.line)), tuple(writer.ports))
  if isinstance(written, str):  # the helpers stay: why
    declared_findings.append(Finding(min(p.line for p in first.ports),
                                     "kept", written))
  writer = GlobalRewriter(aliases, steps, replace, axis, known,
                          declared and declared.name)
  new = wrapper.visit(writer)
  if writer.blockers:
    return rewrite_file.Rewrite(first.code, first.findings + tuple(
        Finding(b.line, "person", _place(b.text))
        for b in writer.blockers), first.ports)
  return rewrite_file.Rewrite(
      rewrite_file.with_imports(new.code, module, writer.uses_static,
                                writer.uses_put),
      tuple(sorted(writer.findings + declared_findings + axes_finding + [
          Finding(line, "changed", text) for line, text in notes],
                   key=lambda f: f.line)),
      tuple(writer.ports))
