"""The rewrite's stages: each imports only the stages before it (issue 73).

`compare/_src/rewrite/` flows read -> plan -> write -> pipeline -> report
and proof -> the CLI, over a few shared modules (the records every stage
hands on, the layouts' names, the first step's helpers' text). A stage
reaching forward (a reader importing a writer) is what this catches; each
stage package says in its docstring what comes in and what goes out.
"""

import ast
import pathlib

REWRITE = (pathlib.Path(__file__).resolve().parents[1] / "compare" / "_src"
           / "rewrite")
# Each stage's rank: a module may import its own stage and lower ones.
RANK = {"records": 0, "layouts": 0, "rewrite_helpers": 0, "read": 1,
        "plan": 2, "write": 3, "pipeline": 4, "report": 5, "proof": 5,
        "rewrite_cli": 6, "__init__": 7}
PACKAGES = ("read", "plan", "write", "proof")


def _stage_violations(root) -> list[str]:
  bad = []
  for path in sorted(root.rglob("*.py")):
    stage = path.relative_to(root).parts[0].removesuffix(".py")
    for node in ast.walk(ast.parse(path.read_text())):
      if not (isinstance(node, ast.ImportFrom) and node.module
              and node.module.startswith("compare._src.rewrite")):
        continue
      parts = node.module.split(".")[3:]
      for other in parts[:1] or [alias.name for alias in node.names]:
        if other != stage and RANK.get(other, 99) >= RANK.get(stage, -1):
          bad.append(f"{path.relative_to(root)} imports {other}")
  return bad


def test_each_stage_imports_only_those_before_it():
  assert _stage_violations(REWRITE) == []
  top = sorted(p.name.removesuffix(".py") for p in REWRITE.iterdir()
               if p.name != "__pycache__")
  assert top == sorted(RANK), top  # a new module is given its stage here


def test_the_check_sees_a_reader_import_a_writer(tmp_path):
  # Negative control: `read` reaching forward into `write` is seen, as is
  # a module of no stage.
  for package in PACKAGES:
    (tmp_path / package).mkdir()
  (tmp_path / "read" / "x.py").write_text(
      "def f():\n  from compare._src.rewrite.write import rewrite_pmap\n")
  (tmp_path / "records.py").write_text(
      "from compare._src.rewrite import stray\n")
  assert _stage_violations(tmp_path) == ["read/x.py imports write",
                                         "records.py imports stray"]


def test_each_stage_package_says_what_comes_in_and_goes_out():
  for package in PACKAGES:
    doc = ast.get_docstring(ast.parse(
        (REWRITE / package / "__init__.py").read_text())) or ""
    assert "Stage" in doc and " in" in doc and " out" in doc, package


def _writers_built_on_others(root) -> list[str]:
  """Classes of the write stage with a base other than LibCST's: a writer
  built on another writer, handing it state by overridden hooks (issue
  73: each step's writer composes its parts instead)."""
  bad = []
  for path in sorted((root / "write").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ClassDef):
        bad += [f"{path.relative_to(root)}: {node.name}({ast.unparse(b)})"
                for b in node.bases
                if not ast.unparse(b).startswith("cst.")]
  return bad


def test_no_writer_inherits_another():
  assert _writers_built_on_others(REWRITE) == []


def test_the_check_sees_a_writer_built_on_another(tmp_path):
  # Negative control: the chain issue 73 removed (a step's writer as a
  # subclass of the first step's) is seen; a LibCST transform is not.
  (tmp_path / "write").mkdir()
  (tmp_path / "write" / "x.py").write_text(
      "class A(cst.CSTTransformer):\n  pass\n"
      "class B(rewrite_pmap.PmapRewriter):\n  pass\n")
  assert _writers_built_on_others(tmp_path) == [
      "write/x.py: B(rewrite_pmap.PmapRewriter)"]
