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
from compare._src.measure import hlo
from compare._src.prove import judging
from compare._src import show_diff
from docs import build_guide as guide
from docs.guide import DOCUMENTS
from docs.guide import figures
from docs.guide import references
from docs.guide import tables
from docs.guide.sources import source
from tests.guide_copies import ROOT
from tests.guide_copies import append
from tests.guide_copies import copy_of_the_repo  # pylint: disable=unused-import (the `copy` fixture)
from tests.guide_copies import edit

TEMPLATES = [template for template, _ in DOCUMENTS]
OUTPUTS = [output for _, output in DOCUMENTS]
_ANCHOR = re.compile(r'<a id="([\w-]+)"></a>')


@pytest.mark.jax010  # it says which jax 0.10 names are gone
def test_guide_is_up_to_date_with_the_code():
  assert guide.check(ROOT) == [], (
      "run `python -m docs.build_guide` and commit " + ", ".join(OUTPUTS))


def test_every_region_the_templates_name_exists():
  refs = [ref for template in TEMPLATES
          for line in guide.template_text(ROOT, template).splitlines()
          if (m := guide._DIRECTIVE.match(line)) and m.group(1) in (  # pylint: disable=protected-access
              "code", "excerpt", "diff")
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


def test_drift_check_fails_when_a_shown_region_changes(copy):
  guide.main(["--root", str(copy)])  # the copy's documents, up to date
  assert guide.check(copy) == []
  edit(copy / "docs/quick_path.py", "check_vma=False), donate_argnums=0)",
        "check_vma=True), donate_argnums=0)")
  assert any("stale" in p for p in guide.check(copy))
  assert guide.main(["--check", "--root", str(copy)]) == 1


def test_drift_check_fails_when_a_measurement_changes(copy):
  file = copy / guide.MEASURED / "traps.json"
  record = json.loads(file.read_text())
  record["traps"]["scan_trap"]["facts"]["slowdown"] += 1.0
  file.write_text(json.dumps(record))
  assert any("stale" in p for p in guide.check(copy))


def test_drift_check_fails_when_a_tag_disappears(copy):
  edit(copy / "docs/quick_path.py", "# region: quick-after",
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
  append(copy / template, line)
  problems = guide.check(copy)
  assert any(complaint in p and p.startswith(f"{template}: ")
             for p in problems), problems


def test_names_are_resolved_in_the_source_not_guessed():
  assert guide.project_file(ROOT, "sharded.devices.placement")
  assert guide.project_file(ROOT, "shardport.strategies.tolerances.Tolerance")
  assert guide.project_file(ROOT, "shardport.workloads.registry.Workload.loss")
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
  from compare._src.prove import report as compare_report  # pylint: disable=g-import-not-at-top
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

  registry = {**tables.strategies(), "tiny": Tiny()}
  table = guide.tolerance_table(registry)
  assert "| tiny | first step | 2e-05 | 3e-05 | measured tiny |" in table
  # The engine's judging, once for every program, from its own constants.
  assert (f"| every program | lockstep, every step | - | "
          f"{judging.LOCKSTEP_MULTIPLE:g}× the one-step band") in table
  assert f"{judging.CALIBRATION_MULTIPLE:g}× the calibration runs'" in table
  names = [line.split(" | ")[0][2:] for line in table.splitlines()[2:]]
  assert list(dict.fromkeys(names)) == [*registry, "every program"]
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


