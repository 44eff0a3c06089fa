"""bench/'s index names every module, and every file under docs/measured/
was written by a target `python -m bench.measure` runs (issue 73)."""

import ast
import json
import pathlib
import re

from bench import measure
from shardport.strategies import STRATEGIES

ROOT = pathlib.Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def _unnamed(package: pathlib.Path) -> list[str]:
  """The modules and subpackages of `package` its index does not name."""
  index = ast.get_docstring(ast.parse(
      (package / "__init__.py").read_text())) or ""
  inside = [p for p in sorted(package.iterdir())
            if (p.suffix == ".py" and p.stem != "__init__")
            or (p / "__init__.py").is_file()]
  return [p.name for p in inside
          if f"`{p.stem}`" not in index and f"`{p.name}/`" not in index]


def _unreachable(measured: pathlib.Path, targets) -> list:
  """The files of `measured` no target of bench.measure writes: each is
  TARGET.json, or names the target that wrote it (`--measure TARGET`: a
  snapshot kept beside the file its target writes now)."""
  bad = []
  for path in sorted(measured.glob("*.json")):
    command = json.loads(path.read_text()).get("command", "")
    target = re.search(r"--measure (\w+)", command)
    if not (path.stem in targets
            or (target and target.group(1) in targets)):
      bad.append(path.name)
  return bad


def _imports(path: pathlib.Path) -> set[str]:
  """The bench.runners modules `path` imports."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module == "bench.runners":
      found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
        "bench.runners."):
      found.add(node.module.split(".")[2])
  return found


def _unreached(runners: pathlib.Path, scripts: dict) -> list[str]:
  """The modules of bench/runners/ no target of bench.measure runs, nor
  one it runs imports (what the runners share)."""
  modules = {p.stem: p for p in runners.glob("*.py") if p.stem != "__init__"}
  reached = {c[c.index("-m") + 1].split(".")[-1] for c in scripts.values()
             if c[c.index("-m") + 1].startswith("bench.runners.")}
  grown = None
  while grown != reached:
    grown = set(reached)
    reached |= {m for r in grown if r in modules
                for m in _imports(modules[r])}
  return sorted(set(modules) - reached)


def test_every_bench_module_is_named_in_its_index():
  packages = [p.parent for p in sorted(BENCH.rglob("__init__.py"))]
  # bench/ by kind (issue 73): runners, probes, real programs, mutation.
  assert {p.name for p in packages} >= {"bench", "runners", "probes",
                                        "perf", "real_programs",
                                        "mutation"}, packages
  for package in packages:
    assert _unnamed(package) == [], package


def test_every_measured_file_is_written_by_a_target():
  targets = measure.targets(STRATEGIES)
  assert _unreachable(ROOT / "docs" / "measured", targets) == []


def test_every_runner_is_run_by_a_target():
  assert _unreached(BENCH / "runners", measure.SCRIPTS) == []


def test_the_checks_see_a_module_unnamed_and_a_runner_unreachable(tmp_path):
  # Negative controls: a module the index leaves out; prove_scale's file
  # with prove_scale no target (as before issue 73).
  (tmp_path / "__init__.py").write_text('"""`a` does this."""\n')
  (tmp_path / "a.py").write_text("")
  (tmp_path / "b.py").write_text("")
  assert _unnamed(tmp_path) == ["b.py"]
  targets = [t for t in measure.targets(STRATEGIES) if t != "prove_scale"]
  assert _unreachable(ROOT / "docs" / "measured", targets) == [
      "prove_scale.json"]
  # ... and the module itself, with what only it imports, run by none.
  scripts = {k: v for k, v in measure.SCRIPTS.items()
             if k not in ("prove_scale", "prove_scale_reference")}
  assert _unreached(BENCH / "runners", scripts) == ["prove_census",
                                                    "prove_scale"]
