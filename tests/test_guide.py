"""docs/MIGRATION.md, docs/APPENDIX.md and the pages the appendix links to
(docs/MANY-HOSTS.md, docs/MOVING-A-RUNNING-JOB.md) stay true to the code and
the measurements.

Drift (regions, names, paths, anchors across every document, figures and
their provenance lines), the tables derived from the strategy registry and
compare's report, the collective counts the guide's recipe uses, and
--show-diff. Negative controls work on copies of the repo under tmp_path;
the checkout itself is never modified.
"""

import json
import pathlib
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from bench import measure as measuring
from compare import hlo
from compare import show_diff
from docs import build_guide as guide
from docs.guide import APPENDIX
from docs.guide import APPENDIX_TEMPLATE
from docs.guide import DOCUMENTS
from docs.guide import GUIDE
from docs.guide import PAGES
from docs.guide import GuideError
from docs.guide import figures
from docs.guide import references
from docs.guide import tables
from docs.guide.sources import source

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEMPLATES = [template for template, _ in DOCUMENTS]
OUTPUTS = [output for _, output in DOCUMENTS]
_ANCHOR = re.compile(r'<a id="([\w-]+)"></a>')


# What the guide reads: the project's packages, its docs (both templates,
# both documents, the measurements), tests and constraints; never virtual
# environments, data or build outputs.
_COPIED = ("legacy_pmap", "sharded", "compare", "launch", "training",
           "workloads", "docs", "bench", "examples", "tests", "constraints",
           ".ci")


@pytest.fixture(name="copy")
def _copy(tmp_path):
  """The repo's sources under tmp_path (an allowlist: no venvs, no .git)."""
  root = tmp_path / "repo"
  root.mkdir()
  for name in _COPIED:
    if (ROOT / name).is_dir():
      shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns(
          "__pycache__", "*.egg-info", ".pytest_cache", "*.png", "*.orbax*"))
  return root


def _edit(path, old, new):
  text = path.read_text()
  assert old in text, f"{old!r} not in {path}"
  path.write_text(text.replace(old, new, 1))


def _append(path, text):
  with open(path, "a") as f:
    f.write(f"\n{text}\n")


def _section(text, anchor):
  """The body of the section under heading `anchor`, to the next heading."""
  body = text.split(f'<a id="{anchor}"></a>', 1)[1].split("\n", 1)[1]
  return re.split(r"^#{1,3} ", body, maxsplit=1, flags=re.M)[0]


def _notes(text):
  return [line for line in text.splitlines()
          if line.startswith(figures.NOTE)]


@pytest.mark.jax010  # it says which jax 0.10 names are gone
def test_guide_is_up_to_date_with_the_code():
  assert guide.check(ROOT) == [], (
      "run `python -m docs.build_guide` and commit " + ", ".join(OUTPUTS))


def test_every_region_the_templates_name_exists():
  refs = [ref for template in TEMPLATES
          for line in guide.template_text(ROOT, template).splitlines()
          if (m := guide._DIRECTIVE.match(line)) and m.group(1) in (  # pylint: disable=protected-access
              "code", "diff")
          for ref in m.group(2).split()]
  assert any("#quick-after" in ref for ref in refs)
  for ref in refs:
    text, _ = source(ROOT, ref)
    assert text.strip(), ref


@pytest.mark.parametrize("template", TEMPLATES)
def test_every_name_and_path_the_templates_mention_exists(template):
  text = guide.template_text(ROOT, template)
  assert guide.check_references(ROOT, text) == []
  for dotted in guide._LINK.findall(text):  # pylint: disable=protected-access
    assert guide.project_file(ROOT, dotted) is not None, dotted


def test_no_figure_in_the_templates_is_typed_by_hand():
  texts = [guide.template_text(ROOT, template) for template in TEMPLATES]
  assert [figures.unbacked(text) for text in texts] == [[]] * len(texts)
  assert figures.FIGURE.search(texts[0])  # the core shows figures


def test_every_provenance_line_names_its_sources_in_the_appendix():
  texts = {output: (ROOT / output).read_text() for output in OUTPUTS}
  for text in texts.values():
    assert "<sup>" not in text  # a figure is its number and unit only
  assert len(_notes(texts[guide.OUTPUT])) >= 5
  entries = {a: line for line in texts[APPENDIX].splitlines()
             if (a := next(iter(_ANCHOR.findall(line)), "")).startswith("src-")}
  for output, text in texts.items():
    for line in _notes(text):
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
  contents = _section(text, "contents")
  assert re.findall(r"\]\(#([\w-]+)\)", contents) == headings[1:]
  titles = re.findall(r"^#{2,3} <a id=\"[\w-]+\"></a>(.*)$", text, re.M)
  for title in titles[1:]:  # as the heading says, its number included
    assert f"[{title.strip()}](#" in contents, title


def test_a_figure_is_its_number_and_its_section_ends_with_one_note(copy):
  slowdown = figures.sources(copy)["traps"].lookup(["scan_trap", "slowdown"])
  _append(copy / guide.TEMPLATE, "## <a id=\"probe\"></a>Probe\n\n"
          "The scan is {{traps/scan_trap/slowdown:.1f ×}} slower; the port "
          "aliases {{data_parallel/run/shard_map/memory/alias_mib:.2f MiB}} "
          "and the scan is still {{traps/scan_trap/slowdown:.1f ×}} slower."
          "\n\nA closing paragraph.\n\n"
          "### <a id=\"probe-next\"></a>Next\n\nNo figures here.")
  built = guide.build_all(copy)
  section = _section(built[guide.OUTPUT], "probe")
  assert f"The scan is {slowdown:.1f}× slower;" in section
  assert " MiB and the scan" in section and "<sup>" not in section
  lines = [line for line in section.splitlines() if line.strip()]
  assert lines[-2] == "A closing paragraph."
  assert _notes(section) == [lines[-1]]  # one line, at the end
  assert lines[-1].startswith(
      "*Measured: [traps](APPENDIX.md#src-traps), [data_parallel]"
      "(APPENDIX.md#src-data-parallel) (8 emulated CPU devices; ")
  assert lines[-1].endswith("how to measure again: see each).*")
  assert _notes(_section(built[guide.OUTPUT], "probe-next")) == []
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
  assert _notes(_section(core, "a")) == [note.format("APPENDIX.md")]
  assert "- [A](#a)" in core and "](#d)" not in core  # its own contents
  under, after = _section(appendix, "d").split(note.format(""))
  assert under.rstrip().endswith("|") and "After the table." in after
  # a table ending a section that shows figures: one note for both
  assert _notes(_section(appendix, "e")) == [note.format("")]
  assert _section(appendix, "e").rstrip().endswith(note.format(""))
  # a table that names its file (many_hosts.json) gets none
  assert _notes(_section(appendix, "h")) == []
  assert "(measured/many_hosts.json)" in _section(appendix, "h")
  listed = _section(appendix, "f")
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


def test_drift_check_fails_when_a_shown_region_changes(copy):
  guide.main(["--root", str(copy)])  # the copy's documents, up to date
  assert guide.check(copy) == []
  _edit(copy / "docs/quick_path.py", "check_vma=False), donate_argnums=0)",
        "check_vma=True), donate_argnums=0)")
  assert any("stale" in p for p in guide.check(copy))
  assert guide.main(["--check", "--root", str(copy)]) == 1


@pytest.mark.parametrize("template, output", DOCUMENTS)
def test_check_reports_each_stale_document(copy, capsys, template, output):
  assert guide.main(["--root", str(copy)]) == 0
  wrote = capsys.readouterr().out
  assert all(f"wrote {copy / o}" in wrote for o in OUTPUTS)
  assert guide.check(copy) == []
  stale = [f"{output} is stale: run `python -m docs.build_guide`"]
  _append(copy / output, "Edited by hand.")
  assert guide.check(copy) == stale
  assert guide.main(["--check", "--root", str(copy)]) == 1
  assert stale[0] in capsys.readouterr().err
  (copy / output).unlink()
  assert guide.check(copy) == stale
  guide.main(["--root", str(copy)])
  _append(copy / template, "A paragraph more.")
  assert guide.check(copy) == stale  # the others are still up to date
  assert guide.main(["--root", str(copy)]) == 0
  assert guide.check(copy) == []
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
  _append(copy / template, f"See [there]({link}).")
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
  _append(copy / guide.TEMPLATE, f"See [it](#{only}).")
  assert guide.check(copy) == [
      f"{guide.TEMPLATE}: link to #{only}, which is in {APPENDIX}: link to "
      f"APPENDIX.md#{only}"]
  _edit(copy / guide.TEMPLATE, f"(#{only})", f"(APPENDIX.md#{only})")
  assert guide.check(copy) == [f"{guide.OUTPUT} is stale: run "
                               "`python -m docs.build_guide`"]
  only = sorted(anchors[guide.OUTPUT] - anchors[APPENDIX])[0]
  _append(copy / APPENDIX_TEMPLATE, f"See [it](MIGRATION.md#{only}) and "
          f"[there](#{only}).")
  assert guide.check(copy) == [
      f"{APPENDIX_TEMPLATE}: link to #{only}, which is in {guide.OUTPUT}: "
      f"link to MIGRATION.md#{only}"]


def test_a_link_to_a_pages_anchor_is_checked_in_that_page(copy):
  (page, output), (other, _) = PAGES
  _append(copy / page, "## <a id=\"page-only\"></a>Page only\n\nText.")
  _append(copy / APPENDIX_TEMPLATE, "See [it](#page-only).")
  _append(copy / other, "See [it](#many-processes-in-depth).")
  name = output.rsplit("/", 1)[1]
  assert guide.check(copy) == [
      f"{APPENDIX_TEMPLATE}: link to #page-only, which is in {output}: link "
      f"to {name}#page-only",
      f"{other}: link to #many-processes-in-depth, which is in {APPENDIX}: "
      "link to APPENDIX.md#many-processes-in-depth"]
  _edit(copy / APPENDIX_TEMPLATE, "(#page-only)", f"({name}#page-only)")
  _edit(copy / other, "(#many-processes-in-depth)",
        "(APPENDIX.md#many-processes-in-depth)")
  assert guide.build_all(copy)  # both land now


def test_drift_check_fails_when_a_measurement_changes(copy):
  file = copy / guide.MEASURED / "traps.json"
  record = json.loads(file.read_text())
  record["traps"]["scan_trap"]["facts"]["slowdown"] += 1.0
  file.write_text(json.dumps(record))
  assert any("stale" in p for p in guide.check(copy))


def test_drift_check_fails_when_a_tag_disappears(copy):
  _edit(copy / "docs/quick_path.py", "# region: quick-after",
        "# region: quick-later")
  problems = guide.check(copy)
  assert any("no region 'quick-after'" in p for p in problems), problems


def test_drift_check_fails_on_an_unbalanced_region(copy):
  path = copy / "docs/quick_path.py"
  head, _, tail = path.read_text().rpartition("# endregion\n")
  path.write_text(head + tail)  # the last region never ends
  assert any("never ends" in p for p in guide.check(copy))


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("line, complaint", [
    ("See `sharded.devices.no_such_name`.", "not defined"),
    ("See [[legacy_pmap.data_parallel.no_such_name]].", "not defined"),
    ("Use `jax.no_such_function`.", "exists"),
    ("~~`jax.jit`~~ is gone.", "is gone"),
    ("Open `sharded/no_such_file.py`.", "no path"),
    ("Run `python -m bench.no_such_runner --json F`.", "no module"),
    ("<!-- code: sharded/data_parallel.py#no-such-tag -->", "no-such-tag"),
    ("The loop is 6× slower.", "typed by hand"),
    ("It differs by 4e-7 at most.", "typed by hand"),
    ("It uses 1.4 MiB.", "typed by hand"),
    ("It is {{traps/scan_trap/no_such_fact:.1f}}× slower.", "is not in"),
    ("It is {{no_such_file/x:.1f}}× slower.", "no measurement"),
    ("See [there](#no-such-anchor).", "missing anchor"),
    ("See [the notes](no-such-notes.md).", "link to missing"),
])
def test_a_wrong_line_in_either_template_is_caught(copy, template, line,
                                                  complaint):
  _append(copy / template, line)
  problems = guide.check(copy)
  assert any(complaint in p and p.startswith(f"{template}: ")
             for p in problems), problems


def test_names_are_resolved_in_the_source_not_guessed():
  assert guide.project_file(ROOT, "sharded.devices.placement")
  assert guide.project_file(ROOT, "compare.tolerances.Tolerance")
  assert guide.project_file(ROOT, "workloads.registry.Workload.loss")
  assert guide.project_file(ROOT, "sharded.devices.placement.x") is None
  assert guide.library_exists("lax.pmean")
  assert not guide.library_exists("jax.tree_map")
  assert not guide.library_exists("jax.experimental.optimizers")


def _report(windows_pmap, windows_shard_map):
  run = lambda w: {"examples_per_s": float(np.median(w)),
                   "examples_per_s_spread": [min(w), max(w)],
                   "window_examples_per_s": w, "compile_s": 1.5,
                   "final_loss": 64.0, "test_accuracy": 0.5,
                   "collectives": {"all-reduce": 1},
                   "memory": {"temp_bytes": 2 ** 20}}
  return {"strategy": "data_parallel", "workload": "cnn",
          "dataset": "digits", "platform": "cpu", "devices": 8,
          "processes": 1, "jax_version": "0.10.2", "steps": 20,
          "global_batch": 256, "seed": 0, "date": "2026-01-02",
          "load_average": [1.0, 2.0, 3.0], "pmap_runtime": "jit(shard_map)",
          "runs": {"pmap": run(windows_pmap),
                   "shard_map": run(windows_shard_map)},
          "equivalence": [], "verdict": "pass"}


def test_measured_table_is_compares_report_or_says_how(copy):
  shutil.rmtree(copy / guide.MEASURED)
  assert "--measure data_parallel" in guide.measured_table(copy)
  (copy / guide.MEASURED).mkdir()
  report = _report([5000.0, 5100.0, 4900.0], [5000.0, 5050.0, 4950.0])
  (copy / guide.MEASURED / "data_parallel.json").write_text(
      json.dumps(report))
  table = guide.measured_table(copy)
  assert "jax 0.10.2" in table and "2026-01-02" in table
  assert "load average 1.0/2.0/3.0" in table
  from compare import report as compare_report  # pylint: disable=g-import-not-at-top
  for row in compare_report.run_rows(report):  # compare's own rendering
    assert "| " + " | ".join(row) + " |" in table
  assert "temp MiB" in table
  assert "per example it is final loss × 8/256 (e.g. 2.0000)" in table


def test_the_throughput_sentence_comes_from_the_windows():
  same = tables.throughput_sentence(_report([100.0, 110, 90, 105],
                                            [104.0, 106, 93, 101]))
  assert "no measurable difference" in same
  faster = tables.throughput_sentence(_report([100.0, 110, 90, 105],
                                              [120.0, 133, 108, 126]))
  assert "**shard_map is faster by 20%**" in faster
  slower = tables.throughput_sentence(_report([120.0, 132, 108, 126],
                                              [100.0, 110, 90, 105]))
  assert "**pmap is faster by 20%**" in slower


def test_tolerance_table_and_programs_come_from_the_registry(copy):
  class Tiny:  # what a new strategy brings: no docs edited
    program = "tiny"
    tolerances = {"first_step": type("T", (), {"rtol": 2e-5, "atol": 3e-5,
                                               "reason": "measured tiny"})()}
    calibration_multiple = 4.0
    calibration_reason = "tiny calibration"
    lockstep_multiple = 7.0
    lockstep_reason = "tiny lockstep"

  registry = {**tables.strategies(), "tiny": Tiny()}
  table = guide.tolerance_table(registry)
  assert "| tiny | first step | 2e-05 | 3e-05 | measured tiny |" in table
  assert "4× the calibration runs' spread" in table
  assert "| tiny | lockstep, every step | - | 7× the one-step band" in table
  names = [line.split(" | ")[0][2:] for line in table.splitlines()[2:]]
  assert list(dict.fromkeys(names)) == list(registry)  # the registry's order
  programs = guide._programs(copy, registry)  # pylint: disable=protected-access
  assert "--show-diff tiny" in programs
  order = [programs.index(f'id="program-{name}"') for name in
           tables.strategies()]
  assert order == sorted(order)


def test_link_if_exists_points_at_the_file_once_written(copy):
  path = "docs/moving-a-running-job.template.md"
  (copy / path).unlink(missing_ok=True)  # as before the section was written
  assert "not written yet" in guide._link_if_exists(copy, path)  # pylint: disable=protected-access
  (copy / path).write_text("# Moving a running job\n")
  assert "[Moving a running job](../docs/moving-a-running-job.template.md)" in (
      guide._link_if_exists(copy, path))  # pylint: disable=protected-access


def _rolled_step():
  mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
  x = jax.device_put(np.ones((4, 64, 3), np.float32),
                     NamedSharding(mesh, P(None, "data")))
  w = jax.device_put(np.ones(3, np.float32), NamedSharding(mesh, P()))

  def accumulate(w, x):  # under jit: an all-reduce per microbatch
    def body(acc, xb):
      return acc + jax.grad(lambda w: jnp.sum((xb @ w) ** 2))(w), None
    return lax.scan(body, jnp.zeros(3), x)[0]

  return jax.jit(accumulate).lower(w, x).compile().as_text()


def test_collective_counts_follow_rolled_loops():
  text = _rolled_step()
  assert hlo.count_collectives(text)["all-reduce"] == 1  # written once
  run = hlo.executed(text)
  assert run.collectives["all-reduce"] == 4  # run once per microbatch
  assert run.loops == [{"body": run.loops[0]["body"], "trip_count": 4}]
  assert run.all_reduce_bytes == 4 * 3 * 4  # four f32[3]
  assert run.unknown == []
  by_computation = hlo.collectives_by_computation(text)
  assert list(by_computation.values()) == [1]
  assert hlo.ENTRY not in by_computation  # it is in the loop body


def test_collective_counts_say_where_they_are_static():
  mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
  x = jax.device_put(np.ones(64, np.float32), NamedSharding(mesh, P("data")))

  def until(x, n):  # a while loop whose trip count is data
    body = lambda c: (c[0] + 1, c[1] + lax.psum(jnp.sum(x) * c[1], "data"))
    return lax.while_loop(lambda c: c[0] < n, body, (0, 1.0))[1]

  step = jax.jit(jax.shard_map(until, mesh=mesh, in_specs=(P("data"), P()),
                               out_specs=P()))
  run = hlo.executed(step.lower(x, 3).compile().as_text())
  assert run.loops[0]["trip_count"] is None
  assert run.unknown and "no known trip count" in run.unknown[0]


def _hunks(diff):
  hunks, current = [], []
  for line in diff.splitlines()[2:] + [" "]:
    if line[:1] in "-+":
      current.append(line[1:])
    elif current:
      hunks, current = hunks + [current], []
  return hunks


_PARALLELISM = re.compile(
    r"pmap|shard|mesh|P\(|replica|device|jit|axis|pmean|psum|placement|"
    r"variant|VARIANTS|member|spec|collective|stack|vma|static", re.I)


def _programs_with_both_backends():
  return [p for p in show_diff.programs()
          if all((ROOT / b / f"{p}.py").is_file() for b in show_diff.BACKENDS)]


@pytest.mark.parametrize("program", _programs_with_both_backends())
def test_program_diff_shows_only_the_parallelism(program):
  diff = show_diff.program_diff(program)
  lines = diff.splitlines()
  assert lines[0] == f"--- a/legacy_pmap/{program}.py"
  assert lines[1] == f"+++ b/sharded/{program}.py"
  hunks = _hunks(diff)
  assert hunks
  for hunk in hunks:  # each change is about parallelism, or an import
    assert any(_PARALLELISM.search(l) for l in hunk) or all(
        not l.strip() or l.startswith(("import ", "from ")) for l in hunk), (
            hunk)


def test_program_diff_rejects_unknown_and_missing_programs(tmp_path):
  with pytest.raises(ValueError, match="unknown program"):
    show_diff.program_diff("pipeline")
  (tmp_path / "legacy_pmap").mkdir()
  (tmp_path / "legacy_pmap" / "ensemble.py").write_text("x = 1\n")
  with pytest.raises(ValueError, match="does not exist"):
    show_diff.program_diff("ensemble", root=tmp_path)


def test_prove_port_example_catches_the_gradient_trap():
  import optax  # pylint: disable=g-import-not-at-top
  from docs import prove_port as prove  # pylint: disable=g-import-not-at-top
  right = prove.verdicts(prove.example())
  assert right["port vs pmap"]["verdict"] == "bitwise"
  assert right["port vs reference"]["verdict"] in ("bitwise", "close")
  trap = prove.verdicts(prove.example(check_vma=True))
  assert trap["port vs reference"]["verdict"] == "differ"
  assert trap["pmap vs reference"]["verdict"] in ("bitwise", "close")
  # Adam hides the trap in the params after one step; the gradients do not.
  adam = prove.example(check_vma=True, tx=optax.adam(1e-3))
  assert prove.verdicts(adam)["port vs reference"]["verdict"] != "differ"
  assert prove.verdicts(adam, "grads")["port vs reference"][
      "verdict"] == "differ"


def test_measure_dates_each_file_and_names_its_command(copy, monkeypatch):
  calls = []

  def fake_run(cmd, cwd):
    out = pathlib.Path(cmd[cmd.index("--json") + 1])
    out.write_text('{"strategy": "data_parallel", "verdict": "pass"}')
    calls.append(cmd)
    assert cwd == copy  # `python -m` from the root runs the root's modules
    return 0

  monkeypatch.setattr(measuring.subprocess, "call", fake_run)
  assert guide.measure("data_parallel", copy) == 0
  assert calls[-1][1:4] == ["-m", "compare", "--strategy"]
  written = json.loads((copy / guide.MEASURED / "data_parallel.json")
                       .read_text())
  assert written["date"].startswith("20") and written["verdict"] == "pass"
  assert written["command"] == ("python -m docs.build_guide --measure "
                                "data_parallel")
  assert "load_average" in written
  assert guide.measure("traps", copy) == 0
  assert calls[-1][1:3] == ["-m", "docs.traps"]


def test_every_measurement_runs_a_module_of_the_checkout():
  for target in measuring.targets(tables.strategies()):
    argv = measuring.command(target, "OUT")
    assert argv[1] == "-m" and argv[-2:] == ["--json", "OUT"], argv
    assert references.module_exists(ROOT, argv[2]), (target, argv[2])


def test_measure_rejects_an_unknown_target(capsys):
  with pytest.raises(SystemExit):
    guide.main(["--measure", "no_such_target"])
  assert "choose from" in capsys.readouterr().err


def test_a_part_loses_its_notes_but_keeps_its_directives(tmp_path):
  (tmp_path / "part.md").write_text(
      "# Title\n\n<!-- A note for whoever opens this file,\nover lines. -->\n"
      "\nText.\n\n<!-- code: docs/quick_path.py#quick-after -->\n")
  text = guide._part(tmp_path, "part.md")  # pylint: disable=protected-access
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
          and m.group(1) in ("code", "diff")]
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
           if guide._NOTE.match(line)]  # pylint: disable=protected-access
  assert notes and all(note not in text for note in notes)
  assert "```python" in text  # its code regions, filled in


def test_the_pages_show_their_measured_tables():
  (_, many_hosts), (_, moving) = PAGES
  many_hosts, moving = ((ROOT / o).read_text() for o in (many_hosts, moving))
  assert "(measured/many_hosts.json)" in many_hosts
  assert "| strategy | run | 2 × 4 examples/s |" in many_hosts
  assert moving.count("(measured/handover.json)") == 2  # proof and cost
  assert "save blocks the loop, ms (mean)" in moving


def test_the_appendix_summarises_each_page_and_links_to_it():
  template = (ROOT / APPENDIX_TEMPLATE).read_text()
  body = template.split('<a id="many-hosts-in-depth"></a>', 1)[1]
  body = re.split(r"^## ", body, maxsplit=1, flags=re.M)[0]
  assert len(body.strip().splitlines()) <= 25
  appendix = (ROOT / APPENDIX).read_text()
  core = (ROOT / guide.OUTPUT).read_text()
  for anchor, (_, output) in zip(("many-processes-in-depth",
                                  "checkpoints-in-depth"), PAGES):
    section = _section(appendix, anchor)
    assert f"]({output.rsplit('/', 1)[1]})" in section, anchor
    assert f"(APPENDIX.md#{anchor})" in core  # what the core links to
  assert _section(appendix, "many-hosts-in-depth").strip()


def test_a_page_links_its_provenance_line_to_the_appendix(copy):
  page, output = PAGES[0]
  _append(copy / page, "<!-- A note for whoever opens the page. -->\n\n"
          "## Probe\n\nThe scan is {{traps/scan_trap/slowdown:.1f ×}} "
          "slower.\n\n<!-- table: dispatch -->\n\n## After\n\nNo figures.")
  built = guide.build_all(copy)
  assert "A note for whoever" not in built[output]
  probe = built[output].split("\n## Probe\n", 1)[1].split("\n## ", 1)[0]
  notes = _notes(probe)
  assert len(notes) == 1 and probe.rstrip().endswith(notes[0])
  assert "[traps](APPENDIX.md#src-traps)" in notes[0]
  assert "[dispatch](APPENDIX.md#src-dispatch)" in notes[0]
  assert _notes(built[output].split("\n## After\n", 1)[1]) == []
  for anchor in "src-traps", "src-dispatch":  # the entries it links to
    assert f'<a id="{anchor}"></a>' in built[APPENDIX]


def test_a_template_loses_its_notes_but_keeps_its_directives():
  text = ("# T\n\n<!-- A note,\nover lines. -->\n\nText.\n\n<!-- toc -->\n"
          "\n<!-- figures -->\n<!-- code: a.py#b -->\n```\n<!-- shown -->\n"
          "```\n")
  assert guide.strip_notes(text) == (
      "# T\n\nText.\n\n<!-- toc -->\n\n<!-- figures -->\n"
      "<!-- code: a.py#b -->\n```\n<!-- shown -->\n```\n")
  with pytest.raises(GuideError, match="never ends"):
    guide.strip_notes("<!-- a note\nthat never ends\n")


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
