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


def test_every_bench_module_is_named_in_its_index():
  for package in (BENCH, BENCH / "perf", BENCH / "real_programs"):
    assert _unnamed(package) == [], package


def test_every_measured_file_is_written_by_a_target():
  targets = measure.targets(STRATEGIES)
  assert _unreachable(ROOT / "docs" / "measured", targets) == []


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
