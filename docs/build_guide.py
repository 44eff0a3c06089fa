"""Builds the guide's documents from their templates and the tagged code.

    python -m docs.build_guide          # regenerate every document
    python -m docs.build_guide --check  # exit 1 if one is stale or broken
    python -m docs.build_guide --measure data_parallel --measure traps
                                        # measure, then build

(from the repository root). The documents (`docs.guide.DOCUMENTS`):
docs/MIGRATION.template.md -> docs/MIGRATION.md, the core a team acts on;
docs/APPENDIX.template.md -> docs/APPENDIX.md, the harness, the measured
reports and the internals; and the pages the appendix links to, outside the
guide: docs/many-hosts.template.md -> docs/MANY-HOSTS.md and
docs/moving-a-running-job.template.md -> docs/MOVING-A-RUNNING-JOB.md. `--measure`
runs the measurement's own command (`bench/measure.py`: `python -m
compare`, `python -m bench.NAME_runs`, ...).

The guide's code and figures are never pasted: the templates name tagged
regions (`# region: TAG` ... `# endregion` in the source) and measurement
files, and this script pulls them. Directives, in any template (each alone
on its line):

    <!-- code: PATH#TAG -->            the region, as a python block
    <!-- code: PATH#TAG+TAG -->        regions one after another, one block
    <!-- code: PATH::NAME -->          one def, class or assignment
    <!-- excerpt: REF -->              the same, marked as runnable only in
                                       its file (tests/test_snippets.py runs
                                       every other block as pasted)
    <!-- diff: PATH#TAG PATH#TAG -->   legacy vs sharded, changed lines marked
    <!-- diff: PATH::NAME PATH::NAME -->  the same for two defs or classes
    <!-- table: measured -->           each strategy's report (docs/measured)
    <!-- table: measured NAME -->      strategy NAME's alone
    <!-- table: tolerances -->         each strategy's tolerances and reasons
    <!-- table: errors -->             the index of error messages
    <!-- table: dispatch -->           time per call of a small step
    <!-- table: many-hosts -->         2 processes x 4 devices against 1 x 8
    <!-- table: handover -->           a job moved between the backends
    <!-- table: checkpoint-cost -->    what its saves and restores cost
    <!-- table: sweep -->              each strategy on 1, 2, 4, 8 devices
    <!-- table: ensemble-runs -->      the ensemble port over repeated runs
    <!-- programs -->                  docs/programs/STRATEGY.md, in the
                                       registry's order
    <!-- part: PATH -->                PATH's text (a section kept in its
                                       own file), less its title line
    <!-- link-if-exists: PATH -->      a link to PATH, or that it is not
                                       written yet
    <!-- figures -->                   where each figure comes from (in one
                                       document only: the appendix)
    <!-- toc -->                       the document's own contents: every
                                       section and subsection with an anchor

Any other HTML comment that starts a line outside a fenced block is a note
to whoever opens the template or part, and is left out of the output.

Inline, `{{SOURCE/PATH:FORMAT UNIT}}` is a figure from
docs/measured/SOURCE.json (`docs/guide/figures.py`), shown as the number and
its unit; each section (a `#`, `##` or `###` heading's body) that shows
figures ends with one provenance line, `*Measured: [SOURCE](...)...*`,
naming each file once, linked to its entry in the `<!-- figures -->` list.
A table rendered from measurements that does not name its file gets the
same line under it. A number with a unit typed into the prose fails the
build. `[[pkg.module.name]]` becomes a link to its file and every name, path
and anchor is checked (`docs/guide/references.py`): `[t](#anchor)` must land
in its own document, `[t](OTHER.md#anchor)` (`APPENDIX.md#anchor`,
`MIGRATION.md#anchor`, `MANY-HOSTS.md#anchor`: any document's output) in
that one. Line numbers are deliberately not shown, so only a change to a
shown region (or a renamed name) makes the guide stale. Every error names
the template it comes from.
"""

import argparse
import os
import pathlib
import re
import sys

from bench import measure as measuring
from docs.guide import DOCUMENTS
from docs.guide import MEASURED
from docs.guide import OUTPUT
from docs.guide import ROOT
from docs.guide import TEMPLATE
from docs.guide import GuideError
from docs.guide.assembly import contents
from docs.guide.assembly import part as _part
from docs.guide.assembly import strip_notes
from docs.guide import figures
from docs.guide import grid
from docs.guide import jobs
from docs.guide import references
from docs.guide import scaling
from docs.guide import sources
from docs.guide import tables
from docs.guide import team
from docs.guide.references import LINK as _LINK
from docs.guide.references import check_references
from docs.guide.references import library_exists
from docs.guide.references import project_file
from docs.guide.sources import regions
from docs.guide.sources import source as _source
from docs.guide.tables import measured_table
from docs.guide.tables import tolerance_table

HEADER = ("<!-- Generated by docs/build_guide.py from {template}: edit the "
          "template or the tagged code, then run "
          "`python -m docs.build_guide`. -->\n\n")
PROGRAMS = "docs/programs"
_DIRECTIVE = re.compile(r"^<!--\s*(code|excerpt|diff|table|programs|link-if-exists|"
                        r"figures|toc)\b:?\s*(.*?)\s*-->\s*$")
_SOURCES = "\0figures\0"  # where the figure list goes once all are known
_TOC = "\0toc\0"  # where the contents go once all headings are known
_SECTION = re.compile(r"^#{1,3} ")  # a heading that starts a section

__all__ = ["DOCUMENTS", "GuideError", "MEASURED", "TEMPLATE", "OUTPUT",
           "build", "build_all", "check", "check_references",
           "library_exists", "measure", "measured_table", "project_file",
           "regions", "tolerance_table", "main"]


def _programs(root, registry=None):
  """Each strategy's walkthrough (docs/programs/NAME.md), registry order."""
  registry = tables.strategies() if registry is None else registry
  parts = []
  for name, strategy in registry.items():
    file = root / PROGRAMS / f"{name}.md"
    if file.is_file():
      parts.append(file.read_text().rstrip("\n"))
    else:
      parts.append(f"### <a id=\"program-{name}\"></a>{name}\n\nNo "
                   "walkthrough yet: `python -m compare "
                   f"--show-diff {getattr(strategy, 'program', name)}` shows "
                   "every line the port changed.")
  return "\n\n".join(parts)


def _link_if_exists(root, path):
  if (root / path).is_file():
    title = (root / path).read_text().splitlines()[0].lstrip("# ").strip()
    return f"**[{title}](../{path})** (`{path}`)."
  return f"*`{path}` is not written yet.*"


_TABLES = {"measured": measured_table,
           "tolerances": lambda _: tolerance_table(),
           "errors": tables.errors_table,
           "dispatch": tables.dispatch_table,
           "many-hosts": jobs.many_hosts_table,
           "handover": jobs.handover_table,
           "checkpoint-cost": jobs.checkpoint_cost_table,
           "sweep": scaling.sweep_table,
           "ensemble-runs": scaling.ensemble_runs_table,
           "verdict-grid": grid.correct_table,
           "verdict-grid-devices": grid.devices_table,
           "verdict-grid-detection": grid.detection_table,
           "team-programs": team.team_programs_table}
# The measurement files each table reads (the tolerances read none).
_TABLE_READS = {"measured": lambda root: [
    name for name in tables.strategies()
    if (root / MEASURED / f"{name}.json").is_file()],
                "errors": lambda _: ["errors"],
                "dispatch": lambda _: ["dispatch"],
                "many-hosts": lambda _: ["many_hosts"],
                "handover": lambda _: ["handover"],
                "checkpoint-cost": lambda _: ["handover"],
                "sweep": lambda _: ["sweep"],
                "ensemble-runs": lambda _: ["ensemble_runs"],
                "team-programs": lambda _: [team.NAME],
                **dict.fromkeys(("verdict-grid", "verdict-grid-devices",
                                 "verdict-grid-detection"),
                                lambda _: list(grid.FILES))}


def _directive(root, kind, args):
  """A directive's text, and the measurement files it shows without naming
  them (which its provenance line must name)."""
  if kind in ("code", "excerpt"):
    return sources.code(root, args, excerpt=kind == "excerpt"), []
  if kind == "diff":
    return sources.diff(root, args), []
  if kind == "link-if-exists":
    return _link_if_exists(root, args), []
  if kind == "figures":
    return _SOURCES, []
  if kind == "toc":
    return _TOC, []
  if kind == "table" and args.startswith("measured "):
    name = args.split(maxsplit=1)[1]
    return tables.measured_one(root, name), []  # the block links its file
  if kind == "table" and args in _TABLES:
    text = _TABLES[args](root)
    reads = _TABLE_READS.get(args, lambda _: [])(root)
    return text, [name for name in reads
                  if f"measured/{name}.json" not in text]
  raise GuideError(f"unknown directive {kind}: {args}")


def template_text(root, template=TEMPLATE):
  """A template with programs and parts pasted in, less its notes to whoever
  opens it (`strip_notes`): what the build reads."""
  file = root / template
  if not file.is_file():
    raise GuideError("no such template (`docs.guide.DOCUMENTS` names it)")
  text = strip_notes(file.read_text())
  text = re.sub(r"^<!--\s*part:\s*(\S+)\s*-->[ \t]*$",
                lambda m: _part(root, m.group(1)), text, flags=re.M)
  return re.sub(r"^<!--\s*programs\s*-->\s*$", lambda _: _programs(root),
                text, flags=re.M)


def _lists_figures(text):
  """Whether a template holds the `<!-- figures -->` list."""
  return any((m := _DIRECTIVE.match(line)) and m.group(1) == "figures"
             for _, line in references.prose_lines(text))


def _render(root, template, found, where):
  """One document's text: directives run, figures drawn, each section that
  shows figures ended by its provenance line; the figure list and the
  contents left as placeholders. Returns the text and the measurement files
  it shows, in first-use order. `where`: how this document links to the one
  holding the list of sources."""
  out, fenced, shown = [], False, {}
  section, table_note = {}, None  # the section's sources; its table's note

  def close():  # the end of a section: its provenance line
    nonlocal section, table_note
    if section:
      while out and not out[-1].strip():
        out.pop()
      if table_note is not None and table_note[0] == len(out) - 1:
        out[-1] = figures.note([*table_note[1], *section], found, where)
      else:
        out.extend(["", figures.note(section, found, where)])
      out.append("")
    section, table_note = {}, None

  for line in template.splitlines():
    if line.lstrip().startswith("```"):
      fenced = not fenced
    match = None if fenced else _DIRECTIVE.match(line)
    if match:
      text, unnamed = _directive(root, *match.groups())
      out.append(text)
      if unnamed:  # a table that does not say where it comes from
        shown.update(dict.fromkeys(unnamed))
        out.extend(["", figures.note(unnamed, found, where)])
        table_note = (len(out) - 1, unnamed)
    elif fenced:
      out.append(line)
    else:
      if _SECTION.match(line):
        close()
      line = _LINK.sub(lambda m: references.link(root, m), line)
      out.append(figures.render(root, line, section, found))
      shown.update(section)
  close()
  return "\n".join(out).rstrip("\n") + "\n", shown


def _failed(problems):
  err = GuideError("\n".join(problems))
  err.problems = problems
  return err


def _same_file(template, output):
  """Whether the two names are one file (`docs/many-hosts.template.md` and
  `docs/MANY-HOSTS.md` on a file system that ignores case)."""
  try:
    return os.path.samefile(template, output)
  except OSError:  # one of them is not there
    return False


def build_all(root: pathlib.Path = ROOT) -> dict[str, str]:
  """Every document's text ({output: text}), from the templates, the code
  and the measurements. Raises GuideError naming each broken template."""
  templates, problems = {}, []
  for template, output in DOCUMENTS:
    if _same_file(root / template, root / output):
      problems.append(f"{template}: it is the same file as its output "
                      f"{output} here (a file system that ignores case): "
                      "give one another name in `docs.guide.DOCUMENTS`")
      continue
    try:
      templates[output] = template_text(root, template)
    except GuideError as err:
      problems.append(f"{template}: {err}")
  if problems:
    raise _failed(problems)
  named = {o: t for t, o in DOCUMENTS}  # output -> its template
  homes = [o for o, text in templates.items() if _lists_figures(text)]
  if len(homes) > 1:
    raise _failed([f"{named[o]}: a second <!-- figures --> list (the first "
                   f"is in {named[homes[0]]})" for o in homes[1:]])
  home = homes[0] if homes else None
  found, used, built = figures.sources(root), {}, {}
  for output, text in templates.items():
    bad = check_references(root, text) + figures.unbacked(text)
    if bad:
      problems.append(f"{named[output]}: " + "; ".join(bad))
      continue
    where = ("" if home in (None, output)
             else references.relative(output, home))
    try:
      built[output], shown = _render(root, text, found, where)
    except GuideError as err:
      problems.append(f"{named[output]}: {err}")
      continue
    if shown and home is None:
      problems.append(f"{named[output]}: it shows measurements, but no "
                      "template lists where they come from "
                      "(<!-- figures -->)")
    used.update(shown)
  if problems:
    raise _failed(problems)
  for output, text in built.items():
    text = HEADER.format(template=named[output]) + text
    text = text.replace(_SOURCES, figures.sources_list(root, used, found))
    built[output] = text.replace(_TOC, contents(text))
  for output, text in built.items():
    bad = references.check_anchors(text, output, built)
    if bad:
      problems.append(f"{named[output]}: " + "; ".join(bad))
  if problems:
    raise _failed(problems)
  return built


def build(root: pathlib.Path = ROOT) -> str:
  """The core document's text (`build_all` gives every document's)."""
  return build_all(root)[OUTPUT]


def check(root: pathlib.Path = ROOT) -> list[str]:
  """Why a document under `root` is broken or stale; empty when all are
  up to date."""
  try:
    built = build_all(root)
  except GuideError as err:
    return list(getattr(err, "problems", [str(err)]))
  return [f"{output} is stale: run `python -m docs.build_guide`"
          for output, text in built.items()
          if not (root / output).is_file()
          or (root / output).read_text() != text]


def measure(target: str, root: pathlib.Path = ROOT, devices: int = 8) -> int:
  """Regenerates docs/measured/TARGET.json (bench/measure.py)."""
  return measuring.measure(target, root, devices)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--check", action="store_true",
                      help="exit 1 if a document of the guide is stale or broken")
  parser.add_argument("--measure", action="append", default=[],
                      metavar="TARGET",
                      help="first regenerate docs/measured/TARGET.json: a "
                      "strategy (python -m compare --strategy TARGET "
                      "--devices 8), traps, dispatch, errors, or all "
                      "(repeatable)")
  parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                      help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.check:
    problems = check(args.root)
    for problem in problems:
      print(problem, file=sys.stderr)
    return 1 if problems else 0
  known = measuring.targets(tables.strategies())
  wanted = [t for m in args.measure for t in (known if m == "all" else [m])]
  unknown = [t for t in wanted if t not in known]
  if unknown:
    parser.error(f"--measure {unknown[0]}: choose from {', '.join(known)}, "
                 "all")
  failed = [t for t in wanted if measure(t, args.root) != 0]
  try:
    built = build_all(args.root)
  except GuideError as err:
    print(err, file=sys.stderr)
    return 1
  for output, text in built.items():
    (args.root / output).write_text(text)
    print(f"wrote {args.root / output}")
  if failed:
    print(f"the measurement did not pass for {', '.join(failed)}",
          file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
