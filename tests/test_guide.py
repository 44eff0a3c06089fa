"""docs/MIGRATION.md stays true to the code: drift, names, --show-diff.

Negative controls work on copies of the repo under tmp_path; the checkout
itself is never modified.
"""

import importlib.util
import pathlib
import shutil
import sys

import pytest

from compare import show_diff

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load(name):
  spec = importlib.util.spec_from_file_location(f"shardport_docs_{name}",
                                                ROOT / "docs" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


guide = _load("build_guide")


@pytest.fixture(name="copy")
def _copy(tmp_path):
  """The repo's sources under tmp_path (no .git, no caches)."""
  root = tmp_path / "repo"
  shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns(
      ".git", "__pycache__", "*.egg-info", ".pytest_cache", "venv", ".venv"))
  return root


def _edit(path, old, new):
  text = path.read_text()
  assert old in text, f"{old!r} not in {path}"
  path.write_text(text.replace(old, new, 1))


def test_guide_is_up_to_date_with_the_code():
  assert guide.check(ROOT) == [], (
      "run `python docs/build_guide.py` and commit docs/MIGRATION.md")


def test_every_region_the_template_names_exists():
  template = (ROOT / guide.TEMPLATE).read_text()
  refs = [ref for line in template.splitlines()
          if (m := guide._DIRECTIVE.match(line)) and m.group(1) != "table"
          for ref in m.group(2).split()]
  assert any("#dp-train-step" in ref for ref in refs)
  for ref in refs:
    text, _ = guide._source(ROOT, ref)
    assert text.strip(), ref


def test_every_name_and_path_the_template_mentions_exists():
  template = (ROOT / guide.TEMPLATE).read_text()
  assert guide.check_references(ROOT, template) == []
  for dotted in guide._LINK.findall(template):
    assert guide.project_file(ROOT, dotted) is not None, dotted


def test_drift_check_fails_when_a_shown_region_changes(copy):
  assert guide.check(copy) == []
  _edit(copy / "sharded/data_parallel.py", "check_vma=False)",
        "check_vma=True)")
  assert any("stale" in p for p in guide.check(copy))
  assert guide.main(["--check", "--root", str(copy)]) == 1


def test_drift_check_fails_when_a_tag_disappears(copy):
  _edit(copy / "legacy_pmap/data_parallel.py", "# region: dp-train-step",
        "# region: dp-step")
  problems = guide.check(copy)
  assert any("no region 'dp-train-step'" in p for p in problems), problems


def test_drift_check_fails_on_an_unbalanced_region(copy):
  _edit(copy / "sharded/data_parallel.py", "# endregion\n", "")
  assert any("never ends" in p for p in guide.check(copy))


@pytest.mark.parametrize("line, complaint", [
    ("See `sharded.devices.no_such_name`.", "not defined"),
    ("See [[legacy_pmap.data_parallel.no_such_name]].", "not defined"),
    ("Use `jax.no_such_function`.", "exists"),
    ("~~`jax.jit`~~ is gone.", "is gone"),
    ("Open `sharded/no_such_file.py`.", "no path"),
    ("<!-- code: sharded/data_parallel.py#no-such-tag -->", "no-such-tag"),
])
def test_a_wrong_name_in_the_template_is_caught(copy, line, complaint):
  with open(copy / guide.TEMPLATE, "a") as f:
    f.write(f"\n{line}\n")
  problems = guide.check(copy)
  assert any(complaint in p for p in problems), problems


def test_names_are_resolved_in_the_source_not_guessed():
  assert guide.project_file(ROOT, "sharded.devices.placement")
  assert guide.project_file(ROOT, "compare.tolerances.Tolerance")
  assert guide.project_file(ROOT, "workloads.registry.Workload.loss")
  assert guide.project_file(ROOT, "sharded.devices.placement.x") is None
  assert guide.library_exists("lax.pmean")
  assert not guide.library_exists("jax.tree_map")
  assert not guide.library_exists("jax.device_put_replicated")
  assert not guide.library_exists("jax.experimental.optimizers")


def test_measured_table_renders_json_or_says_how(copy):
  shutil.rmtree(copy / guide.MEASURED, ignore_errors=True)
  assert "--json docs/measured" in guide.measured_table(copy)
  (copy / guide.MEASURED).mkdir()
  (copy / guide.MEASURED / "data_parallel.json").write_text(
      '{"schema": 1, "strategy": "data_parallel", "workload": "cnn", '
      '"dataset": "digits", "platform": "cpu", "devices": 8, '
      '"processes": 1, "jax_version": "0.10.2", "steps": 20, '
      '"global_batch": 256, "seed": 0, "date": "2026-01-02", '
      '"runs": {"pmap": {"examples_per_s": 5000.0, '
      '"examples_per_s_spread": [4900, 5100], "compile_s": 1.5, '
      '"final_loss": 0.25, "collectives": {"all-reduce": 1}, '
      '"memory": {"temp_bytes": 1048576}}}, "equivalence": [], '
      '"verdict": "pass"}')
  table = guide.measured_table(copy)
  assert "jax 0.10.2" in table and "2026-01-02" in table
  assert "| pmap | 5,000 | 4,900–5,100 | 1.50 | 1 | - | 1.00 |" in table


def _programs():
  return [p for p in show_diff.PROGRAMS
          if all((ROOT / b / f"{p}.py").is_file() for b in show_diff.BACKENDS)]


def test_data_parallel_has_both_backends():
  assert "data_parallel" in _programs()


@pytest.mark.parametrize("program", _programs())
def test_program_diff_shows_only_what_changed(program):
  diff = show_diff.program_diff(program)
  legacy = (ROOT / "legacy_pmap" / f"{program}.py").read_text().splitlines()
  sharded = (ROOT / "sharded" / f"{program}.py").read_text().splitlines()
  lines = diff.splitlines()
  assert lines[0] == f"--- a/legacy_pmap/{program}.py"
  assert lines[1] == f"+++ b/sharded/{program}.py"
  removed = [l[1:] for l in lines[2:] if l.startswith("-")]
  added = [l[1:] for l in lines[2:] if l.startswith("+")]
  assert removed and added
  assert set(removed) <= set(legacy) and set(added) <= set(sharded)
  assert len(added) < len(sharded)  # the files mirror each other


def test_program_diff_rejects_unknown_and_missing_programs(tmp_path):
  with pytest.raises(ValueError, match="unknown program"):
    show_diff.program_diff("pipeline")
  (tmp_path / "legacy_pmap").mkdir()
  (tmp_path / "legacy_pmap" / "ensemble.py").write_text("x = 1\n")
  with pytest.raises(ValueError, match="does not exist"):
    show_diff.program_diff("ensemble", root=tmp_path)


def test_show_diff_on_the_command_line(capsys):
  from compare import cli  # pylint: disable=g-import-not-at-top
  assert cli.main(["--show-diff", "data_parallel"]) == 0
  assert "+++ b/sharded/data_parallel.py" in capsys.readouterr().out
  assert cli.main(["--show-diff", "pipeline"]) == 2


def test_prove_port_example_catches_the_gradient_trap():
  import optax  # pylint: disable=g-import-not-at-top
  prove = _load("prove_port")
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


def test_measure_dates_compares_json(copy, monkeypatch):
  def fake_compare(cmd, cwd):
    out = pathlib.Path(cmd[cmd.index("--json") + 1])
    out.write_text('{"strategy": "data_parallel", "verdict": "pass"}')
    assert cmd[1:4] == ["-m", "compare", "--strategy"] and cwd == copy
    return 0
  monkeypatch.setattr(guide.subprocess, "call", fake_compare)
  assert guide.measure("data_parallel", copy) == 0
  written = (copy / guide.MEASURED / "data_parallel.json").read_text()
  assert '"date": "20' in written and '"verdict": "pass"' in written
  assert '"load_average"' in written
  assert "load average" in guide.measured_table(copy)
