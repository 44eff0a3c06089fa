"""A pmap in a function the file never calls: set aside, the rest rewritten.

flax lm1b (its last pmap version) defines `per_host_sum_pmap`, a pmap over
one device per host, and never calls it. Its callers, if any, are out of
view, so the global step cannot say what it is given; before this, the
whole file was refused for it. Now the function is set aside: `trimmed`
gives the source with each such function's body replaced by `pass` lines
(the same number of lines, so every other line keeps its number), the rest
is rewritten, and `restored` puts each function back as it was written
(`jax.pmap` still runs on jax 0.10). The report names each function.
"""

import ast

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import names
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind

_MARK = "  # compare.rewrite: set aside, never called"


def _pmap_lines(source: str) -> list[int]:
  module = cst.parse_module(source)
  references = names.References(  # pylint: disable=protected-access
      names.pmap_aliases(module))
  metadata.MetadataWrapper(module).visit(references)
  return references.lines


def uncalled(source: str) -> list[ast.FunctionDef]:
  """The module-level functions holding a pmap that the file never reads
  by name (no call, no use as a value, no string naming it), when some
  pmap of the file is outside them; else []."""
  try:
    tree = ast.parse(source)
  except SyntaxError:
    return []
  lines = _pmap_lines(source)
  loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}
  loaded |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
  strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
             and isinstance(n.value, str)}
  found = [node for node in tree.body
           if isinstance(node, ast.FunctionDef) and node.name not in loaded
           and node.name not in strings and any(
               node.lineno <= line <= node.end_lineno for line in lines)
           and not _pmap_names_read_outside(tree, node, lines)]
  inside = {line for node in found for line in lines
            if node.lineno <= line <= node.end_lineno}
  return found if set(lines) - inside else []


def _pmap_names_read_outside(tree, fn, lines) -> bool:
  """Whether a name `fn` binds to a pmap is read outside `fn`: set aside,
  the rest would read it otherwise than the file does."""
  bound = {t.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
           and any(node.lineno <= l <= node.end_lineno for l in lines)
           for t in node.targets if isinstance(t, ast.Name)}
  return any(isinstance(n, ast.Name) and n.id in bound
             and not fn.lineno <= n.lineno <= fn.end_lineno
             for n in ast.walk(tree))


def trimmed(source: str, functions) -> str:
  """`source` with each function's lines (its decorators and body) turned
  into a stub of as many lines."""
  lines = source.splitlines(keepends=True)
  for node in functions:
    start = (node.decorator_list[0].lineno if node.decorator_list
             else node.lineno)
    count = node.end_lineno - start + 1
    lines[start - 1:node.end_lineno] = (
        [f"def {node.name}(*_args, **_kwargs):{_MARK}\n"]
        + ["  pass\n"] * (count - 1))
  return "".join(lines)


def restored(code: str, source: str, functions) -> str:
  """`code` (written from `trimmed`) with each function as `source` has it."""
  given = source.splitlines(keepends=True)
  for node in functions:
    start = (node.decorator_list[0].lineno if node.decorator_list
             else node.lineno)
    lines = code.splitlines(keepends=True)
    stub = f"def {node.name}(*_args, **_kwargs):{_MARK}\n"
    at = lines.index(stub)
    lines[at:at + node.end_lineno - start + 1] = given[start - 1:
                                                      node.end_lineno]
    code = "".join(lines)
  return code


def findings(functions, source: str) -> list[Finding]:
  lines = _pmap_lines(source)
  return [Finding(node.lineno, Kind.LEFT, (
      f"{node.name} is never called in this file: its pmap (line(s) "
      f"{[l for l in lines if node.lineno <= l <= node.end_lineno]}) is "
      "left as written (jax.pmap still runs on jax 0.10); delete the "
      "function, or port it by hand where another file calls it"))
          for node in functions]
