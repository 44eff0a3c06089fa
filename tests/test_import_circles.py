"""No module of the tree imports itself back, however far round (issue 73).

`test_layers` orders the packages; inside one package two modules may still
import each other, one of them inside a function so that it loads (which
hides the circle rather than removes it). Every import counts, at any depth
in the file; `from pkg import mod` is the module `pkg.mod` where it is one.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("shardport", "legacy_pmap", "sharded", "compare", "bench",
            "examples", "docs", "tests")


def _modules(root):
  """`{dotted name: path}` of every module of the project's packages."""
  found = {}
  for package in PACKAGES:
    for path in sorted((root / package).rglob("*.py")):
      parts = path.relative_to(root).with_suffix("").parts
      if parts[-1] == "__init__":
        parts = parts[:-1]
      found[".".join(parts)] = path
  return found


def _imports(name, path, modules):
  """The project modules `path` (the module `name`) imports, anywhere."""
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  out = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      out |= {alias.name for alias in node.names} & modules.keys()
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: from the module's own package up
        up = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
      for alias in node.names:
        full = f"{base}.{alias.name}"
        out.add(full if full in modules else base)
  return (out & modules.keys()) - {name}


def circles(root=ROOT) -> list[list[str]]:
  """Each set of modules that import one another round (Tarjan's strongly
  connected components of more than one module), sorted."""
  modules = _modules(root)
  graph = {name: _imports(name, path, modules)
           for name, path in modules.items()}
  index, low, stack, found = {}, {}, [], []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while not component or component[-1] != v:
        component.append(stack.pop())
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return sorted(found)


def test_no_import_circle():
  assert circles() == []


def test_the_check_sees_a_circle_closed_inside_a_function(tmp_path):
  # Negative control: a -> b at module level, b -> c -> a, c's import in a
  # function (as rewrite_global and global_plain were); d imports a only.
  package = tmp_path / "compare"
  package.mkdir()
  (package / "__init__.py").write_text("")
  (package / "a.py").write_text("from compare import b\n")
  (package / "b.py").write_text("import compare.c\n")
  (package / "c.py").write_text("def f():\n  from . import a\n")
  (package / "d.py").write_text("from compare.a import x\n")
  assert circles(tmp_path) == [["compare.a", "compare.b", "compare.c"]]
