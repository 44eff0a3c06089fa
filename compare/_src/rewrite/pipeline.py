"""The pipeline: one source in, its `Rewrite` out, the stages in order.

`rewrite_source` is the first step: read pmap's uses (`read.names`), write
each pmap (`write.rewrite_pmap`), add the helpers (`write.imports`).
`rewrite_global_source` is both steps (`--global`): a first step's output
read back (`read.first_step_undone`), the first step, the program read and
planned (`plan.global_layouts`), the global step written without helpers
(`write.global_step`, one writer: `write.global_rewriter`) and tidied
(`write.global_tidy`); where refused, retried with each function nothing
calls set aside (`read.global_uncalled`). A file whose pmaps are all flax
NNX's or equinox's (no jax.pmap) is ported whole, in either step, by
`write.other_pmaps_file`.

The second step, to global arrays: the first step keeps pmap's stacked
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
  how its outputs are read (`plan.global_layouts`): `P()` for a replicated
  value, `P(axis)` for a global batch, pmap's stacked layout kept
  for the rest (a key per device; outputs read per device).

Why the numbers stay pmap's: with `check_vma=False` a `P()` output keeps
each device's own copy, as pmap's stacked output did, and a read takes
device 0's, as `unreplicate` did. Where the reading cannot tell a layout, or
a value is read in a way the global layout changes, nothing of the global
step is written: the file gets the first step and the report names each
place and why (exit 1).
"""

import dataclasses

import libcst as cst
from libcst import metadata

from compare._src.rewrite import records
from compare._src.rewrite.plan import global_declared
from compare._src.rewrite.plan import global_layouts
from compare._src.rewrite.read import first_step_undone
from compare._src.rewrite.read import global_uncalled
from compare._src.rewrite.read import names
from compare._src.rewrite.read import other_pmaps
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject
from compare._src.rewrite.write import global_step
from compare._src.rewrite.write import global_tidy
from compare._src.rewrite.write import global_written
from compare._src.rewrite.write import imports
from compare._src.rewrite.write import other_pmaps_file
from compare._src.rewrite.write import rewrite_pmap

AXES = "the pmaps name "  # several axes, each a mesh: no call site moved
# The Port's declared layout (`--prove`), named here as before.
Declared = global_declared.Declared


def rewrite_source(source: str, path: str = "<string>") -> records.Rewrite:
  """Rewrites every `jax.pmap` of one Python source.

  Args:
    source: the file's text.
    path: its name, for the messages.

  Returns:
    The `Rewrite`.

  Raises:
    RewriteError: `source` is not Python, or has no pmap.
  """
  try:
    module = cst.parse_module(source)
  except cst.ParserSyntaxError as err:
    raise records.RewriteError(
        f"{path} is not Python: line {err.raw_line}: {err.message}") from None
  aliases = names.pmap_aliases(module)
  wrapper = metadata.MetadataWrapper(module)
  references = names.References(aliases)
  wrapper.visit(references)
  if not references.lines and (not references.removed
                                or _theirs_only(module)):
    return _no_pmap(module, source, path)
  rewriter = rewrite_pmap.PmapRewriter(aliases, path)
  new = wrapper.visit(rewriter)
  written = rewriter.written
  findings = list(written.findings)
  seen = {f.line for f in findings if f.kind in (Kind.CHANGED, Kind.PERSON)}
  findings += [Finding(line, Kind.PERSON, "jax.pmap used as a value (not "
                       "called or a decorator): rewrite it by hand")
               for line in sorted(set(references.lines) - seen)]
  findings += [Finding(line, Kind.PERSON, "a function jax 0.10 removed, used "
                       "as a value (not called): replace it by hand "
                       "(docs/MIGRATION.md#staged)")
               for line in sorted(set(references.removed) - seen)]
  helped = bool(written.changed or written.uses_put)
  code = (imports.with_imports(new.code, module, written.uses_static,
                               written.uses_put) if helped else source)
  return records.Rewrite(code, tuple(sorted(findings, key=lambda f: f.line)),
                         tuple(written.ports), imports.helpers_defined(
                             written.uses_static, written.uses_put)
                         if helped else ())


def _axis_of(module, aliases, line, path):
  """The axis the placements name (its source), or None with a blocker at
  `line` (the first pmap's); and a finding where the pmaps name several.

  pmaps over several axes, none inside another (the first step refuses
  that), each map every local device: each step gets its own 1-D mesh of
  them, named as its pmap named its axis. A value placed on one of those
  meshes is laid out on the devices as on any other (jit takes it as it
  is), so the placements name one: the axis most pmaps name.
  """
  # The first step's writing reads each pmap's axis (`pmap_sites.Written`).
  reader = rewrite_pmap.PmapRewriter(aliases, path)
  metadata.MetadataWrapper(module).visit(reader)
  read = reader.written
  axes = set(read.axes) | ({"devices"} if read.unnamed else set())
  if "*" in axes:
    return None, [global_layouts.Blocker(line, (
        "a pmap's axis_name is an expression, not a string: the global "
        "step writes the mesh's axis by name; give it the name"))], []
  named = read.axes + ["devices"] * read.unnamed
  axis = max(sorted(axes), key=named.count)
  if len(axes) == 1:
    return f"\"{axis}\"", [], []
  return f"\"{axis}\"", [], [Finding(line, Kind.CHANGED, (
      f"{AXES}{len(axes)} axes ({sorted(axes)}"
      + ("; 'devices' is a pmap's that names none" if read.unnamed
         else "") + "), none inside another: each step a 1-D mesh of the "
      f"local devices named as its pmap's axis; placements on '{axis}''s "
      "(the same devices, in the same order)"), Subject.AXES)]


# Where a place names no page of the guide, the one a person follows to
# write the global step by hand.
_BY_HAND = "docs/MIGRATION.md#idiom-map"


def _place(blocker) -> Finding:
  """A place's finding: why, and the guide's page for it."""
  text = blocker.text
  if "docs/" not in text:
    text += f" ({_BY_HAND})"
  return Finding(blocker.line, Kind.PERSON,
                 f"global step not written: {text}", Subject.NOT_GLOBAL)


def _refused(rewrite) -> bool:
  """Whether the global step was not written (the file holds the first)."""
  return any(f.subject == Subject.NOT_GLOBAL for f in rewrite.findings)


def rewrite_global_source(source: str, path: str = "<string>",
                          declared: "Declared | None" = None
                          ) -> records.Rewrite:
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
  other = _other_library(source, path)
  if other is not None:
    return other
  try:
    read_back = first_step_undone.undone(source)
  except first_step_undone.UndoError as err:
    raise records.RewriteError(f"{path}: {err}") from None
  if read_back is not None:  # the first step's output: from its program
    both = rewrite_global_source(read_back, path, declared)
    line = first_step_undone.line_of(source, read_back)
    return dataclasses.replace(both, findings=tuple(
        dataclasses.replace(f, line=line(f.line)) for f in both.findings))
  whole = _both_steps(source, path, declared)
  if not _refused(whole):
    return whole
  # Refused: each function never called that holds a pmap, set aside in
  # turn, where that alone lets the rest take the second step.
  for function in global_uncalled.uncalled(source):
    try:
      rest = _both_steps(global_uncalled.trimmed(source, [function]), path,
                         declared)
    except records.RewriteError:
      continue
    if not _refused(rest):
      return dataclasses.replace(
          rest, code=global_uncalled.restored(rest.code, source, [function]),
          findings=tuple(sorted(rest.findings + tuple(
              global_uncalled.findings([function], source)),
                                key=lambda f: f.line)))
  return whole


def _other_library(source: str, path: str) -> "records.Rewrite | None":
  """Both steps of a file whose pmaps are flax NNX's or equinox's and none
  jax's (`other_pmaps_file`); None for any other file."""
  try:
    module = cst.parse_module(source)
  except cst.ParserSyntaxError:
    return None  # the first step says so
  references = names.References(names.pmap_aliases(module))
  metadata.MetadataWrapper(module).visit(references)
  if references.lines or not _theirs_only(module):
    return None
  return _no_pmap(module, source, path, global_step=True)


def _theirs_only(module) -> bool:
  """Whether `module`'s pmaps (it has no jax.pmap) are all flax NNX's or
  equinox's: ported whole, its removed `device_put_replicated` too."""
  other = other_pmaps.find(module)
  return bool(other) and all(use.library for use in other)


def _both_steps(source, path, declared) -> records.Rewrite:
  """`rewrite_global_source` of a pmap program (not the first step's)."""
  first = rewrite_source(source, path)
  refused = _first_step_only(first)
  if refused is not None:
    return refused
  module = cst.parse_module(source)
  aliases = names.pmap_aliases(module)
  axis, blockers, axes_finding = _axis_of(
      module, aliases, min((p.line for p in first.ports), default=1), path)
  wrapper = metadata.MetadataWrapper(module)
  steps, replace, known, found, shadowed, notes = global_layouts.read(
      wrapper, lambda node: names.builds_pmap(node, aliases),
      lambda expr: names.is_pmap_decorator(expr, aliases),
      declared and declared.name, global_written.reduced_by_line(
          wrapper, first.ports))
  blockers += found
  blockers += [global_layouts.Blocker(p.line, (
      "pmap over given devices: the global step builds its mesh from "
      "jax.local_devices()")) for p in first.ports
                if p.devices not in (None, "jax.local_devices()")]
  out_of_view, declared_findings = _out_of_view(steps, first.ports, shadowed,
                                                declared)
  blockers += out_of_view
  if blockers:
    return dataclasses.replace(first, findings=first.findings + tuple(
        _place(b) for b in blockers))
  findings = declared_findings + axes_finding + [
      Finding(line, Kind.CHANGED, text, Subject.PUBLIC)
      for line, text in notes]
  plain = global_step.plain(wrapper, module, first, steps, replace, axis,
                            known, declared, len(axes_finding), source,
                            aliases)
  if isinstance(plain, global_step.Plain):
    code, removed = global_tidy.tidied(source, plain.code)
    return records.Rewrite(code, tuple(sorted(
        plain.findings + findings + removed
        + global_tidy.findings(source, code, plain.ports, wrapper),
        key=lambda f: f.line)), tuple(plain.ports), plain.defined,
                           plain.mesh_after_join)
  if isinstance(plain, str):  # the helpers stay: why
    findings.insert(len(declared_findings), Finding(
        min(p.line for p in first.ports), Kind.KEPT, plain))
  code, written = global_step.with_helpers(wrapper, module, aliases, steps,
                                           replace, axis, known, declared)
  if written.blockers:
    return dataclasses.replace(first, findings=first.findings + tuple(
        _place(b) for b in written.blockers))
  return records.Rewrite(
      code, tuple(sorted(written.findings + findings, key=lambda f: f.line)),
      tuple(written.ports), imports.helpers_defined(written.uses_static,
                                                    written.uses_put))


def _first_step_only(first) -> records.Rewrite | None:
  """The first step and why, where the global step cannot start: a pmap
  the first step left to a person, or no pmap (only calls jax 0.10
  removed, whose pmap is elsewhere); else None."""
  if first.needs_a_person:
    return dataclasses.replace(first, findings=first.findings + (Finding(
        min(f.line for f in first.findings if f.kind == Kind.PERSON),
        Kind.PERSON, "the global step needs every pmap rewritten first: "
        "written is the first step", Subject.NOT_GLOBAL),))
  if not first.ports:
    return dataclasses.replace(first, findings=first.findings + tuple(
        _place(global_layouts.Blocker(f.line, (
            "no pmap in this file takes what this call places; move it with "
            "the step that does (docs/MIGRATION.md#staged)")))
        for f in first.findings if f.kind == Kind.KEPT))
  return None


def _out_of_view(steps, ports, shadowed, declared):
  """`(blockers, findings)` of the steps whose callers are out of view: a
  step never called, or a pmap bound to no name, takes the layout the
  Port declares (`declared`, `--prove`), else is a place for a person;
  a step called otherwise than the Port declares is one too. A pmap made
  in a function the Port calls is added to `steps`."""
  blockers, findings = [], []
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
      findings += global_declared.as_declared(step, declared)
      continue
    blockers.append(global_layouts.Blocker(step.line, (
        f"{step.name} is never called in this file: its callers' layouts "
        "are not in view (--prove with the team's compare.Port declares "
        "them: the state replicated, the batch split by rows: "
        "docs/REWRITE.md#declared)")))
  named = {s.line for s in steps.values()} | shadowed
  for port in ports:
    if port.line in named:
      continue
    if (declared is not None and declared.line == port.line
        and not port.static):
      # The Port's step is this pmap, made in a function (a factory the
      # Port calls): its layout is the Port's.
      steps[declared.name] = global_layouts.StepLayout(port.line,
                                                       declared.name)
      findings += global_declared.as_declared(steps[declared.name], declared)
      continue
    blockers.append(global_layouts.Blocker(port.line, (
        "a pmap bound to no name here (returned, passed on, or called "
        "where it is made): its callers' layouts are not in view; bind it "
        "to a name the file calls, or declare them with --prove (the "
        "team's compare.Port: docs/REWRITE.md#declared)")))
  return blockers, findings


def _no_pmap(module, source: str, path: str, global_step: bool = False
             ) -> records.Rewrite:
  """The `Rewrite` of a file with no jax.pmap whose pmaps are flax NNX's or
  equinox's (both steps with `global_step`); else raises its refusal:
  `NoPmapFound` naming another library's pmap where it has one (never "none
  found" there), or saying it is the first step's output."""
  if "_pmap_call(" in source:
    raise records.RewriteError(
        f"{path}: no jax.pmap found (it is the first step's output: "
        "--global takes the second)")
  other = other_pmaps.find(module)
  if other and all(use.library for use in other):
    # flax NNX's or equinox's pmaps only: ported (`other_pmaps_file`).
    return other_pmaps_file.rewrite(module, path, other, global_step)
  if other:
    raise records.NoPmapFound(f"{path}: " + other[0].advice()
                              + (f" (and {len(other) - 1} more use"
                                 f"{'s' * (len(other) > 2)})"
                                 if len(other) > 1 else ""), other)
  raise records.NoPmapFound(f"{path}: no jax.pmap found")

