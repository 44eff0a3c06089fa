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

import dataclasses

import libcst as cst
from libcst import metadata

from compare._src.rewrite import first_step_undone
from compare._src.rewrite import global_declared
from compare._src.rewrite import global_layouts
from compare._src.rewrite import global_plain
from compare._src.rewrite import global_rewriter
from compare._src.rewrite import global_tidy
from compare._src.rewrite import global_uncalled
from compare._src.rewrite import global_written
from compare._src.rewrite import rewrite_file
from compare._src.rewrite import rewrite_pmap
from compare._src.rewrite.findings import Finding
from compare._src.rewrite.findings import Kind
from compare._src.rewrite.findings import Subject

AXES = "the pmaps name "  # several axes, each a mesh: no call site moved
# The Port's declared layout (`--prove`), named here as before.
Declared = global_declared.Declared


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
  return f"\"{axis}\"", [], [Finding(line, Kind.CHANGED, (
      f"{AXES}{len(axes)} axes ({sorted(axes)}"
      + ("; 'devices' is a pmap's that names none" if reader.unnamed
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
        dataclasses.replace(f, line=line(f.line)) for f in both.findings),
                                both.ports)
  whole = _both_steps(source, path, declared)
  if not _refused(whole):
    return whole
  # Refused: each function never called that holds a pmap, set aside in
  # turn, where that alone lets the rest take the second step.
  for function in global_uncalled.uncalled(source):
    try:
      rest = _both_steps(global_uncalled.trimmed(source, [function]), path,
                         declared)
    except rewrite_file.RewriteError:
      continue
    if not _refused(rest):
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
        min(f.line for f in first.findings if f.kind == Kind.PERSON),
        Kind.PERSON, "the global step needs every pmap rewritten first: "
        "written is the first step", Subject.NOT_GLOBAL),), first.ports)
  if not first.ports:  # only calls jax 0.10 removed: their pmap is elsewhere
    return rewrite_file.Rewrite(first.code, first.findings + tuple(
        _place(global_layouts.Blocker(f.line, (
            "no pmap in this file takes what this call places; move it with "
            "the step that does (docs/MIGRATION.md#staged)")))
        for f in first.findings if f.kind == Kind.KEPT),
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
        _place(b) for b in blockers), first.ports)
  written = global_plain.write(wrapper, module, first, steps, replace, axis,
                              known, declared, len(axes_finding), source,
                              aliases)
  if written is not None and not isinstance(written, str):
    code, writer = written
    code, removed = global_tidy.tidied(source, code)
    return rewrite_file.Rewrite(code, tuple(sorted(
        writer.findings + declared_findings + axes_finding + [
            Finding(line, Kind.CHANGED, text, Subject.PUBLIC)
            for line, text in notes]
        + removed + global_tidy.findings(source, code, writer.ports, wrapper),
        key=lambda f: f.line)), tuple(writer.ports))
  if isinstance(written, str):  # the helpers stay: why
    declared_findings.append(Finding(min(p.line for p in first.ports),
                                     Kind.KEPT, written))
  writer = global_rewriter.GlobalRewriter(aliases, steps, replace, axis, known,
                          declared and declared.name)
  new = wrapper.visit(writer)
  if writer.blockers:
    return rewrite_file.Rewrite(first.code, first.findings + tuple(
        _place(b) for b in writer.blockers), first.ports)
  return rewrite_file.Rewrite(
      rewrite_file.with_imports(new.code, module, writer.uses_static,
                                writer.uses_put),
      tuple(sorted(writer.findings + declared_findings + axes_finding + [
          Finding(line, Kind.CHANGED, text, Subject.PUBLIC)
            for line, text in notes],
                   key=lambda f: f.line)),
      tuple(writer.ports))
