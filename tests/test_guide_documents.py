"""The guide's documents: the core, the appendix and the linked pages.

Their contents lists, provenance lines, links between them, notes left out,
stale outputs, and the lengths issue 21 set: the core within 900 lines, the
guide (core and appendix) shorter than the 2002 lines it had.
"""

import pathlib
import re

import pytest

from docs import build_guide as guide
from docs.guide import APPENDIX
from docs.guide import APPENDIX_TEMPLATE
from docs.guide import DOCUMENTS
from docs.guide import GUIDE
from docs.guide import PAGES
from docs.guide import GuideError
from docs.guide import assembly
from docs.guide import figures
from docs.guide import references
from tests.guide_copies import ROOT
from tests.guide_copies import append
from tests.guide_copies import copy_of_the_repo  # pylint: disable=unused-import (the `copy` fixture)
from tests.guide_copies import edit
from tests.guide_copies import notes_in
from tests.guide_copies import section_of

TEMPLATES = [template for template, _ in DOCUMENTS]
OUTPUTS = [output for _, output in DOCUMENTS]
_ANCHOR = re.compile(r'<a id="([\w-]+)"></a>')


def test_every_provenance_line_names_its_sources_in_the_appendix():
  texts = {output: (ROOT / output).read_text() for output in OUTPUTS}
  for text in texts.values():
    assert "<sup>" not in text  # a figure is its number and unit only
  assert len(notes_in(texts[guide.OUTPUT])) >= 5
  entries = {a: line for line in texts[APPENDIX].splitlines()
             if (a := next(iter(_ANCHOR.findall(line)), "")).startswith("src-")}
  for output, text in texts.items():
    for line in notes_in(text):
      links = re.findall(r"\[(\w+)\]\(((?:APPENDIX\.md)?)#(src-[\w-]+)\)",
                         line)
      assert links and len({name for name, _, _ in links}) == len(links), line
      for name, where, anchor in links:  # the others link into the appendix
        assert where == ("" if output == APPENDIX else "APPENDIX.md"), line
        entry = entries[anchor]
        assert f"**{name}**" in entry and f"(measured/{name}.json)" in entry
        assert "--measure" in entry, entry


@pytest.mark.parametrize("template, output", DOCUMENTS)
def test_the_contents_list_every_section_of_their_document(template, output):
  text = (ROOT / output).read_text()
  headings = re.findall(r"^#{2,3} <a id=\"([\w-]+)\"></a>", text, re.M)
  if not headings:  # a page whose headings carry no anchors: no contents
    assert "<!-- toc -->" not in (ROOT / template).read_text()
    assert re.search(r"^## \w", text, re.M), "a page with no sections"
    return
  assert headings[0] == "contents"
  contents = section_of(text, "contents")
  assert re.findall(r"\]\(#([\w-]+)\)", contents) == headings[1:]
  titles = re.findall(r"^#{2,3} <a id=\"[\w-]+\"></a>(.*)$", text, re.M)
  for title in titles[1:]:  # as the heading says, its number included
    assert f"[{title.strip()}](#" in contents, title


def test_a_figure_is_its_number_and_its_section_ends_with_one_note(copy):
  slowdown = figures.sources(copy)["traps"].lookup(["scan_trap", "slowdown"])
  append(copy / guide.TEMPLATE, "## <a id=\"probe\"></a>Probe\n\n"
          "The scan is {{traps/scan_trap/slowdown:.1f ×}} slower; the port "
          "aliases {{data_parallel/run/shard_map/memory/alias_mib:.2f MiB}} "
          "and the scan is still {{traps/scan_trap/slowdown:.1f ×}} slower."
          "\n\nA closing paragraph.\n\n"
          "### <a id=\"probe-next\"></a>Next\n\nNo figures here.")
  built = guide.build_all(copy)
  section = section_of(built[guide.OUTPUT], "probe")
  assert f"The scan is {slowdown:.1f}× slower;" in section
  assert " MiB and the scan" in section and "<sup>" not in section
  lines = [line for line in section.splitlines() if line.strip()]
  assert lines[-2] == "A closing paragraph."
  assert notes_in(section) == [lines[-1]]  # one line, at the end
  # Issue 33: the core links to the sources; how to measure again is the
  # appendix's to say.
  assert lines[-1] == (
      "*Measured: [traps](APPENDIX.md#src-traps), [data_parallel]"
      "(APPENDIX.md#src-data-parallel) (8 emulated CPU devices).*")
  assert notes_in(section_of(built[guide.OUTPUT], "probe-next")) == []
  for anchor in "src-traps", "src-data-parallel":
    assert f'<a id="{anchor}"></a>' in built[APPENDIX]


def _documents(root, core, appendix, page="# Page\n\nText.\n"):
  """The templates of the copy at `root` replaced by small ones: the core's,
  the appendix's and each page's (`page`)."""
  (root / guide.TEMPLATE).write_text(core)
  (root / APPENDIX_TEMPLATE).write_text(appendix)
  for template, _ in PAGES:
    (root / template).write_text(page)
  return guide.build_all(root)


def test_a_table_that_names_no_source_gets_the_note_once(copy):
  built = _documents(copy, "# Core\n\n<!-- toc -->\n\n## <a id=\"a\"></a>A"
                     "\n\nPer call {{dispatch/tiny/pmap:.0f µs}}.\n",
                     "# Appendix\n\n## <a id=\"d\"></a>D\n\n"
                     "<!-- table: dispatch -->\n\nAfter the table.\n\n"
                     "## <a id=\"e\"></a>E\n\nRatio "
                     "{{dispatch/small/pmap_over_shard_map:.2f ×}}.\n\n"
                     "<!-- table: dispatch -->\n\n"
                     "## <a id=\"h\"></a>H\n\n<!-- table: many-hosts -->\n"
                     "\n## <a id=\"f\"></a>F\n\n<!-- figures -->\n")
  core, appendix = built[guide.OUTPUT], built[APPENDIX]
  note = ("*Measured: [dispatch]({}#src-dispatch) (8 emulated CPU devices; "
          "what ran, when, and how to measure again: see it).*")
  assert notes_in(section_of(core, "a")) == [
      "*Measured: [dispatch](APPENDIX.md#src-dispatch) (8 emulated CPU "
      "devices).*"]
  assert "- [A](#a)" in core and "](#d)" not in core  # its own contents
  under, after = section_of(appendix, "d").split(note.format(""))
  assert under.rstrip().endswith("|") and "After the table." in after
  # a table ending a section that shows figures: one note for both
  assert notes_in(section_of(appendix, "e")) == [note.format("")]
  assert section_of(appendix, "e").rstrip().endswith(note.format(""))
  # a table that names its file (many_hosts.json) gets none
  assert notes_in(section_of(appendix, "h")) == []
  assert "(measured/many_hosts.json)" in section_of(appendix, "h")
  listed = section_of(appendix, "f")
  assert listed.count('<a id="src-') == 1  # each file once, every workload
  assert "**tiny SGD step**" in listed and "**small SGD step**" in listed


def test_figures_need_exactly_one_list_of_sources(copy):
  with pytest.raises(GuideError, match=f"{APPENDIX_TEMPLATE}: a second"):
    _documents(copy, "<!-- figures -->\n", "<!-- figures -->\n")
  with pytest.raises(GuideError, match=f"{re.escape(guide.TEMPLATE)}: it "
                     "shows measurements, but no template lists"):
    _documents(copy, "It is {{traps/scan_trap/slowdown:.1f ×}}.\n", "A.\n")
  built = _documents(copy, "It is {{traps/scan_trap/slowdown:.1f ×}}.\n\n"
                     "<!-- figures -->\n", "A.\n")  # where it is, linked
  assert "*Measured: [traps](#src-traps) (" in built[guide.OUTPUT]


def test_check_reports_each_stale_document(copy, capsys):
  # One copy of the repo; each kind of staleness put on every document at
  # once, then taken back by hand (a check a document a kind took 26 s of
  # CI's 2 cores with nine documents).
  assert guide.main(["--root", str(copy)]) == 0
  wrote = capsys.readouterr().out
  assert all(f"wrote {copy / o}" in wrote for o in OUTPUTS)
  assert guide.check(copy) == []
  every = [f"{output} is stale: run `python -m docs.build_guide`"
           for _, output in DOCUMENTS]
  kept = {path: (copy / path).read_text()
          for pair in DOCUMENTS for path in pair}
  edits = {"edited": lambda t, o: append(copy / o, "Edited by hand."),
           "deleted": lambda t, o: (copy / o).unlink(),
           "template": lambda t, o: append(copy / t, "A paragraph more.")}
  for kind, edit in edits.items():
    for template, output in DOCUMENTS:
      edit(template, output)
    assert sorted(guide.check(copy)) == sorted(every), kind
    for path, text in kept.items():
      (copy / path).write_text(text)
    assert guide.check(copy) == [], kind
  # One document stale: it alone is named (the others still up to date).
  template, output = DOCUMENTS[-1]
  stale = [f"{output} is stale: run `python -m docs.build_guide`"]
  append(copy / template, "A paragraph more.")
  assert guide.check(copy) == stale
  (copy / template).write_text(kept[template])
  # The command: exit 1 naming the stale document, 0 once built.
  append(copy / output, "Edited by hand.")
  assert guide.main(["--check", "--root", str(copy)]) == 1
  assert stale[0] in capsys.readouterr().err
  assert guide.main(["--root", str(copy)]) == 0
  assert guide.main(["--check", "--root", str(copy)]) == 0


def test_a_missing_template_is_named(copy):
  (copy / APPENDIX_TEMPLATE).unlink()
  assert guide.check(copy) == [f"{APPENDIX_TEMPLATE}: no such template "
                               "(`docs.guide.DOCUMENTS` names it)"]
  assert guide.main(["--root", str(copy)]) == 1


@pytest.mark.parametrize("template, link", [
    (guide.TEMPLATE, "APPENDIX.md#no-such-anchor"),
    (APPENDIX_TEMPLATE, "MIGRATION.md#no-such-anchor"),
    (PAGES[0][0], "APPENDIX.md#no-such-anchor"),  # a page to the appendix
    (PAGES[1][0], "MIGRATION.md#no-such-anchor"),
    (APPENDIX_TEMPLATE, "MANY-HOSTS.md#no-such-anchor"),  # to a page
    (PAGES[0][0], "MOVING-A-RUNNING-JOB.md#no-such-anchor")])
def test_a_cross_document_link_to_a_missing_anchor_fails(copy, template,
                                                         link):
  append(copy / template, f"See [there]({link}).")
  problems = guide.check(copy)
  assert [p for p in problems if link in p] == [
      f"{template}: link to missing anchor {link}: docs/{link.split('#')[0]}"
      " has no such anchor"], problems
  with pytest.raises(GuideError, match=re.escape(template)):
    guide.build_all(copy)
  assert guide.main(["--root", str(copy)]) == 1


def test_a_link_to_the_other_documents_anchor_must_name_it(copy):
  guide.main(["--root", str(copy)])  # the copy's documents, up to date
  built = guide.build_all(copy)
  anchors = {o: set(_ANCHOR.findall(text)) for o, text in built.items()}
  only = sorted(anchors[APPENDIX] - anchors[guide.OUTPUT])[0]
  append(copy / guide.TEMPLATE, f"See [it](#{only}).")
  assert guide.check(copy) == [
      f"{guide.TEMPLATE}: link to #{only}, which is in {APPENDIX}: link to "
      f"APPENDIX.md#{only}"]
  edit(copy / guide.TEMPLATE, f"(#{only})", f"(APPENDIX.md#{only})")
  assert guide.check(copy) == [f"{guide.OUTPUT} is stale: run "
                               "`python -m docs.build_guide`"]
  only = sorted(anchors[guide.OUTPUT] - anchors[APPENDIX])[0]
  append(copy / APPENDIX_TEMPLATE, f"See [it](MIGRATION.md#{only}) and "
          f"[there](#{only}).")
  assert guide.check(copy) == [
      f"{APPENDIX_TEMPLATE}: link to #{only}, which is in {guide.OUTPUT}: "
      f"link to MIGRATION.md#{only}"]


def test_a_link_to_a_pages_anchor_is_checked_in_that_page(copy):
  (page, output), (other, _) = PAGES[:2]
  append(copy / page, "## <a id=\"page-only\"></a>Page only\n\nText.")
  append(copy / APPENDIX_TEMPLATE, "See [it](#page-only).")
  append(copy / other, "See [it](#many-processes-in-depth).")
  name = output.rsplit("/", 1)[1]
  assert guide.check(copy) == [
      f"{APPENDIX_TEMPLATE}: link to #page-only, which is in {output}: link "
      f"to {name}#page-only",
      f"{other}: link to #many-processes-in-depth, which is in {APPENDIX}: "
      "link to APPENDIX.md#many-processes-in-depth"]
  edit(copy / APPENDIX_TEMPLATE, "(#page-only)", f"({name}#page-only)")
  edit(copy / other, "(#many-processes-in-depth)",
        "(APPENDIX.md#many-processes-in-depth)")
  assert guide.build_all(copy)  # both land now


def test_a_part_loses_its_notes_but_keeps_its_directives(tmp_path):
  (tmp_path / "part.md").write_text(
      "# Title\n\n<!-- A note for whoever opens this file,\nover lines. -->\n"
      "\nText.\n\n<!-- code: docs/quick_path.py#quick-after -->\n")
  text = assembly.part(tmp_path, "part.md")
  assert "note" not in text and "Title" not in text
  assert text.startswith("Text.")
  assert "<!-- code: docs/quick_path.py#quick-after -->" in text


def test_every_code_block_of_the_core_is_code_ci_runs():
  """The core types no code block by hand: each is a tagged region of a
  file the suite imports or runs (its tests then run the region's code)."""
  text = guide.template_text(ROOT, TEMPLATES[0])
  assert "```" not in text
  refs = [m.group(2).split()[0] for line in text.splitlines()
          if (m := guide._DIRECTIVE.match(line))  # pylint: disable=protected-access
          and m.group(1) in ("code", "excerpt", "diff")]
  assert len(refs) > 20
  suite = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
  for ref in refs:
    path = ref.split("#")[0].split("::")[0]
    module = path.removesuffix(".py").replace("/", ".")
    parent, _, name = module.rpartition(".")
    assert (path in suite or module in suite
            or f"from {parent} import {name}" in suite
            or path.startswith("tests/")), ref


def test_the_core_stays_short_enough_to_act_on():
  # Issue 21: the part a team acts on fits in 900 lines; the rest is the
  # appendix.
  core = (ROOT / DOCUMENTS[0][1]).read_text().splitlines()
  assert len(core) <= 900, len(core)


def test_the_guide_is_shorter_than_2002_lines():
  # The core and its appendix; the launcher's internals and the recipes are
  # pages of their own that the appendix links to.
  lines = sum(len((ROOT / output).read_text().splitlines())
              for output in GUIDE)
  assert lines < 2002, lines


@pytest.mark.parametrize("template, output", PAGES)
def test_a_page_is_a_document_of_its_own(template, output):
  source = (ROOT / template).read_text()
  text = (ROOT / output).read_text()
  title = source.splitlines()[0]
  assert title.startswith("# ")  # its title, under the generated header
  header = guide.HEADER.format(template=template)
  assert text.startswith(header + title + "\n\n")
  comments = [line for _, line in references.prose_lines(text)
              if "<!--" in line]
  assert comments == [header.strip()]  # no directive, no note left
  notes = [line for _, line in references.prose_lines(source)
           if assembly._NOTE.match(line)]  # pylint: disable=protected-access
  assert notes and all(note not in text for note in notes)
  assert "```python" in text  # its code regions, filled in


def test_the_pages_show_their_measured_tables():
  (_, many_hosts), (_, moving), (_, beyond), (_, rewrite), *_ = PAGES
  many_hosts, moving, beyond, rewrite = (
      (ROOT / o).read_text() for o in (many_hosts, moving, beyond, rewrite))
  for strategy in ("ensemble_data", "fsdp"):  # each with its own lines
    assert f"(measured/{strategy}.json)" in beyond
  assert "params+opt state per device" in beyond
  assert "mesh: 2 members x 4 data devices" in beyond
  assert "(measured/many_hosts.json)" in many_hosts
  assert "| strategy | run | 2 × 4 examples/s |" in many_hosts
  assert moving.count("(measured/handover.json)") == 2  # proof and cost
  assert "save blocks the loop, ms (mean)" in moving
  assert "(APPENDIX.md#src-rewrite)" in rewrite  # its provenance line
  assert "changed: pmap over" in rewrite and "same output:\nTrue" in rewrite
  team = (ROOT / "docs" / "TEAM-PROGRAMS.md").read_text()
  assert "| `linen_conv_bn` | pass |" in team
  assert "(should fail)" not in team  # every wrong port and plant failed


def test_the_appendix_summarises_each_page_and_links_to_it():
  template = (ROOT / APPENDIX_TEMPLATE).read_text()
  body = template.split('<a id="many-hosts-in-depth"></a>', 1)[1]
  body = re.split(r"^## ", body, maxsplit=1, flags=re.M)[0]
  assert len(body.strip().splitlines()) <= 35  # three pages, a few lines each
  appendix = (ROOT / APPENDIX).read_text()
  core = (ROOT / guide.OUTPUT).read_text()
  for anchor, (_, output) in zip(("many-processes-in-depth",
                                  "checkpoints-in-depth"), PAGES):
    section = section_of(appendix, anchor)
    assert f"]({output.rsplit('/', 1)[1]})" in section, anchor
    assert f"(APPENDIX.md#{anchor})" in core  # what the core links to
  beyond = PAGES[2][1].rsplit("/", 1)[1]
  assert f"]({beyond})" in section_of(appendix, "beyond-one-axis")
  assert f"]({beyond})" in section_of(core, "nested-pmap")
  assert section_of(appendix, "many-hosts-in-depth").strip()


def test_a_page_links_its_provenance_line_to_the_appendix(copy):
  page, output = PAGES[0]
  append(copy / page, "<!-- A note for whoever opens the page. -->\n\n"
          "## Probe\n\nThe scan is {{traps/scan_trap/slowdown:.1f ×}} "
          "slower.\n\n<!-- table: dispatch -->\n\n## After\n\nNo figures.")
  built = guide.build_all(copy)
  assert "A note for whoever" not in built[output]
  probe = built[output].split("\n## Probe\n", 1)[1].split("\n## ", 1)[0]
  notes = notes_in(probe)
  assert len(notes) == 1 and probe.rstrip().endswith(notes[0])
  assert "[traps](APPENDIX.md#src-traps)" in notes[0]
  assert "[dispatch](APPENDIX.md#src-dispatch)" in notes[0]
  assert notes_in(built[output].split("\n## After\n", 1)[1]) == []
  for anchor in "src-traps", "src-dispatch":  # the entries it links to
    assert f'<a id="{anchor}"></a>' in built[APPENDIX]


def test_a_template_loses_its_notes_but_keeps_its_directives():
  text = ("# T\n\n<!-- A note,\nover lines. -->\n\nText.\n\n<!-- toc -->\n"
          "\n<!-- figures -->\n<!-- code: a.py#b -->\n```\n<!-- shown -->\n"
          "```\n")
  assert assembly.strip_notes(text) == (
      "# T\n\nText.\n\n<!-- toc -->\n\n<!-- figures -->\n"
      "<!-- code: a.py#b -->\n```\n<!-- shown -->\n```\n")
  with pytest.raises(GuideError, match="never ends"):
    assembly.strip_notes("<!-- a note\nthat never ends\n")


def test_a_document_whose_output_is_its_template_is_refused(copy):
  # On a file system that ignores case docs/many-hosts.template.md is
  # docs/MANY-HOSTS.md: the build must not write the page over its template.
  page, output = PAGES[0]
  before = (copy / page).read_text()
  (copy / output).unlink(missing_ok=True)
  (copy / output).symlink_to(pathlib.PurePath(page).name)
  assert guide.check(copy) == [
      f"{page}: it is the same file as its output {output} here (a file "
      "system that ignores case): give one another name in "
      "`docs.guide.DOCUMENTS`"]
  assert guide.main(["--root", str(copy)]) == 1
  assert (copy / page).read_text() == before
