"""The packages' layers: no import points upward, none goes in a circle.

The shared core (`workloads`, `launch`, `strategies`, `training`) lives in
the project's namespace, `shardport`; the top-level imports are `compare`,
`legacy_pmap`, `sharded` and `shardport` only.

`workloads` -> `launch` -> `strategies` -> `training` -> the backends ->
`compare` -> `bench` (the measurements that write `docs/measured`) -> `docs`
(the guide, whose builder runs them, and the examples it quotes) -> `tests`.
Every import counts, including those inside functions (they hide a cycle
rather than remove it). A strategy names its backend modules as strings,
imported when a run first asks for them (`strategy.RunSpec`).
"""

import ast
import pathlib
import subprocess
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Layer of each top-level package; a module may import its own layer's
# package and any lower one. The backends share a layer and never import
# each other.
LAYERS = {"workloads": 0, "launch": 1, "strategies": 2, "training": 3,
          "legacy_pmap": 4, "sharded": 4, "compare": 5, "bench": 6,
          "examples": 6, "docs": 7, "tests": 8}


# The layers that live in the project's namespace, `shardport.<layer>`.
CORE = ("workloads", "launch", "strategies", "training")


def _path(layer):
  return ROOT / "shardport" / layer if layer in CORE else ROOT / layer


def _modules():
  for package in LAYERS:
    for path in sorted(_path(package).rglob("*.py")):
      yield package, path


def _layer_of(name):
  parts = name.split(".")
  return parts[1] if parts[0] == "shardport" and len(parts) > 1 else parts[0]


def _imported_packages(path):
  """The project packages `path` imports, at any depth in the file."""
  found = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names = ([f"shardport.{alias.name}" for alias in node.names]
               if node.module == "shardport" else [node.module])
    else:
      continue
    found |= {_layer_of(name) for name in names} & set(LAYERS)
  return found


def _violations():
  bad = []
  for package, path in _modules():
    for imported in _imported_packages(path):
      if imported == package:
        continue
      if LAYERS[imported] >= LAYERS[package]:
        bad.append(f"{path.relative_to(ROOT)} imports {imported}")
  return bad


def test_no_import_points_upward_or_sideways():
  assert _violations() == []


def test_the_check_sees_an_upward_import_inside_a_function(tmp_path,
                                                           monkeypatch):
  # Negative control: an import hidden in a function body is still seen.
  planted = tmp_path / "shardport" / "workloads"
  planted.mkdir(parents=True)
  (planted / "x.py").write_text("def f():\n  from compare import testing\n")
  monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
  monkeypatch.setattr(sys.modules[__name__], "LAYERS",
                      {"workloads": 0, "compare": 4})
  (tmp_path / "compare").mkdir()
  assert _violations() == ["shardport/workloads/x.py imports compare"]


def _loaded_after(statement):
  """The project modules loaded by running `statement` in a new process."""
  code = (f"import sys\n{statement}\n"
          "print(' '.join(sorted(m for m in sys.modules "
          "if m.split('.')[0] in ('compare', 'shardport', 'legacy_pmap', "
          "'sharded'))))")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                       capture_output=True, text=True,
                       env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
  return out.stdout.split()


@pytest.mark.parametrize("backend", ["legacy_pmap", "sharded"])
def test_training_programs_load_nothing_from_compare(backend, tmp_path):
  # The whole program as `python -m B.train` runs it, up to its first step
  # (linreg: what it loads is the program's, not the model's; the CNN
  # compiled for 10 s more).
  loaded = _loaded_after(
      f"from {backend} import train\n"
      f"train.main(['--strategy', 'data_parallel', '--steps', '1', "
      f"'--workload', 'linreg', '--batch-size', '32', "
      f"'--devices', '1', '--workdir', {str(tmp_path / 'w')!r}])")
  assert "shardport.training.loop" in loaded
  assert not [m for m in loaded if m.split(".")[0] == "compare"], loaded


def test_launch_imports_no_jax():
  # The launcher runs before any device count is set.
  code = ("import sys\nfrom shardport.launch import baseline, distributed, emulation, "
          "files, launcher, options\nassert 'jax' not in sys.modules")
  subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


# compare's public face: `compare.__all__`'s names, the modules behind them
# and the pytest plugin; the engine, measurement, presentation and our
# strategies are `compare._src` (issue 30).
COMPARE_PUBLIC = ["checks", "conversions", "pmap_checkpoints", "pytest_plugin",
                  "rewrite", "testing"]


def _public_looking(package):
  """The modules and subpackages of `package` whose names do not say they
  are private (a leading underscore; `__init__` and `__main__` aside)."""
  return sorted(path.stem for path in package.iterdir()
                if not path.name.startswith("_")
                and (path.suffix == ".py" or (path / "__init__.py").exists()))


def test_compare_shows_only_its_public_modules():
  assert _public_looking(ROOT / "compare") == COMPARE_PUBLIC


def test_the_check_sees_an_engine_module_made_public(tmp_path):
  # Negative control: a runner beside the public modules is seen.
  for name in [*COMPARE_PUBLIC, "__init__", "runner"]:
    (tmp_path / f"{name}.py").write_text("")
  (tmp_path / "_src").mkdir()
  (tmp_path / "_src" / "__init__.py").write_text("")
  assert _public_looking(tmp_path) == sorted([*COMPARE_PUBLIC, "runner"])



# The top-level packages `pip install shardport` puts beside a team's own.
TOP_LEVEL = ["compare", "legacy_pmap", "sharded", "shardport"]


def _installed(pyproject_text):
  """The top-level packages a pyproject's setuptools `include` installs."""
  find = tomllib.loads(pyproject_text)["tool"]["setuptools"]["packages"]
  return sorted({name.split(".")[0].rstrip("*")
                 for name in find["find"]["include"]})


def test_no_generic_top_level_package_is_installed():
  assert _installed((ROOT / "pyproject.toml").read_text()) == TOP_LEVEL
  assert not [p for p in CORE if (ROOT / p).exists()]


def test_the_check_sees_a_generic_package_installed():
  # Negative control: `training` installed at the top again is seen.
  text = (ROOT / "pyproject.toml").read_text().replace(
      '"shardport*"', '"shardport*", "training*"')
  assert _installed(text) == sorted([*TOP_LEVEL, "training"])


# compare's engine: three packages in order, a few modules beside them
# (issue 58: the rewrite and the prover are packages of their own).
ENGINE_ORDER = {"measure": 0, "prove": 1, "rewrite": 2}
ENGINE = ROOT / "compare" / "_src"


def _engine_violations(engine):
  bad = []
  for package, rank in ENGINE_ORDER.items():
    for path in sorted((engine / package).rglob("*.py")):
      for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
          parts = node.module.split(".")
          if parts[:2] == ["compare", "_src"] and len(parts) > 2:
            other = parts[2]
            if ENGINE_ORDER.get(other, 3) > rank:
              bad.append(f"{path.relative_to(engine)} imports {other}")
  return bad


def test_the_engine_packages_import_only_those_before_them():
  assert _engine_violations(ENGINE) == []
  top = [p for p in ENGINE.iterdir() if p.name != "__pycache__"
         and (p.suffix == ".py" or (p / "__init__.py").exists())]
  assert len(top) <= 12, sorted(p.name for p in top)


def test_the_check_sees_the_prover_import_the_rewrite(tmp_path):
  # Negative control: `prove` reaching up into `rewrite` is seen.
  for package in ENGINE_ORDER:
    (tmp_path / package).mkdir()
  (tmp_path / "prove" / "x.py").write_text(
      "def f():\n  from compare._src.rewrite import rewrite_cli\n")
  assert _engine_violations(tmp_path) == ["prove/x.py imports rewrite"]
