"""What the global step leaves dead or stale: removed, or named for a person.

Code that fed pmap's layout only is dead once the step takes global arrays:
a `split` nothing calls, the `n_devices` only `split` read. A function's
own dead names go (`tidied`): no code out of view can read a function's
locals, so an undecorated nested def and a name assigned a value whose
making does nothing else (a device count, a length) are removed, with the
comment lines above them. A module's dead names and every comment about
the extra leading dimension stay, named by line (`findings`): a test or
another module may read a module's names, and a comment is the team's.
What flows in: the program's source and the written one; out: the tidied
code, `changed` findings for what went and `left` ones for what stayed.
"""

import ast
import io
import re
import tokenize

import libcst as cst

from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject

# Words of a comment about pmap's layout that the global step changed.
STALE = re.compile(r"\[0\]|leading (dimension|axis)|first device|replicat|"
                   r"(each|every|per) device|stacked", re.I)
DEAD_REMOVED = "dead local removed: "  # their words (Subject.DEAD)
# The calls whose value is all a dead assignment makes: removing it
# changes nothing but that a value is not made.
PURE_CALLS = frozenset({"jax.local_device_count", "jax.device_count",
                        "jax.process_count", "jax.process_index", "len"})


def _bindings(tree) -> dict:
  """Each name the code binds (assigned, a def, a class) -> its first line."""
  found = {}
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      found.setdefault(node.name, node.lineno)
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      found.setdefault(node.id, node.lineno)
  return found


def _loads(tree, dead: set) -> dict:
  """How often each name is read, outside the defs named in `dead` and
  outside the right-hand sides of names in `dead`."""
  counts = {}

  def visit(node):
    if isinstance(node, ast.FunctionDef) and node.name in dead:
      return
    if (isinstance(node, ast.Assign) and all(
        isinstance(t, ast.Name) and t.id in dead for t in node.targets)):
      return
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
      counts[node.id] = counts.get(node.id, 0) + 1
    for child in ast.iter_child_nodes(node):
      visit(child)

  visit(tree)
  return counts


def dead_names(source: str, code: str) -> list[tuple[str, int]]:
  """`(name, line in source)` of each name the program read that the
  written code binds and no longer reads (nor does any code that reads
  it, transitively: `n_devices`, read only by a dead `split`)."""
  before, after = ast.parse(source), ast.parse(code)
  read_before = _loads(before, set())
  bound_after, bound_before = _bindings(after), _bindings(before)
  dead: set = set()
  while True:
    reads = _loads(after, dead)
    more = {name for name in bound_after if name in bound_before
            and read_before.get(name) and not reads.get(name)} - dead
    if not more:
      break
    dead |= more
  return sorted(((n, bound_before[n]) for n in dead), key=lambda x: x[1])


def _pure(expression: str) -> bool:
  """Whether evaluating `expression` does nothing but make its value (no
  call but `PURE_CALLS`, no assignment expression, no yield or await)."""
  for node in ast.walk(ast.parse(expression.strip(), mode="eval")):
    if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield,
                         ast.YieldFrom)):
      return False
    if isinstance(node, ast.Call) and ast.unparse(
        node.func) not in PURE_CALLS:
      return False
  return True


class _DeadLocals(cst.CSTTransformer):
  """Removes, inside functions, the undecorated defs of `removable` and
  the lone assignments of a pure value to one of its names."""

  def __init__(self, removable: set):
    super().__init__()
    self.removable, self.removed, self._depth = removable, [], 0

  def visit_FunctionDef(self, node) -> None:
    del node
    self._depth += 1

  def leave_FunctionDef(self, original, updated):
    self._depth -= 1
    name = original.name.value
    if self._depth and name in self.removable and not original.decorators:
      self.removed.append(name)
      return cst.RemoveFromParent()
    return updated

  def leave_SimpleStatementLine(self, original, updated):
    statement = original.body[0]
    if (self._depth and len(original.body) == 1
        and isinstance(statement, cst.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0].target, cst.Name)
        and statement.targets[0].target.value in self.removable
        and _pure(cst.Module([]).code_for_node(statement.value))):
      self.removed.append(statement.targets[0].target.value)
      return cst.RemoveFromParent()
    return updated


def tidied(source: str, code: str) -> tuple[str, list[Finding]]:
  """`code` without its functions' own dead names, and a `changed`
  finding for each, by its line in `source`.

  A round removes only names nothing reads any more, so `n_devices`, read
  by the dead `split`, goes in the round after `split`; a name a kept def
  reads (a decorated one, or a default argument) stays.
  """
  lines, removed = dict(dead_names(source, code)), []
  while True:
    reads = _loads(ast.parse(code), set())
    remover = _DeadLocals({name for name, _ in dead_names(source, code)
                           if not reads.get(name)})
    new = cst.parse_module(code).visit(remover).code
    if not remover.removed:
      break
    try:
      compile(new, "<written>", "exec")
    except SyntaxError:  # a block left empty: the name stays, named
      break
    code = new
    removed += remover.removed
  return code, [Finding(lines[name], Kind.CHANGED, (
      f"{DEAD_REMOVED}{name}: nothing reads it now (it fed pmap's stacked "
      "layout), and as its function's own name nothing out of view can"),
                        Subject.DEAD)
                for name in dict.fromkeys(removed)]


def _comments(source: str) -> list[tuple[int, str]]:
  try:
    return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(
        io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
  except (tokenize.TokenError, SyntaxError):
    return []


def stale_comments(source: str, code: str, bodies) -> list[tuple[int, str]]:
  """`(line in source, comment)` of each comment of the written code about
  pmap's layout (`STALE`), outside the steps' own bodies (`bodies`: line
  ranges of the source), where the layout per device still holds."""
  kept = {text for _, text in _comments(code)}
  return [(line, text) for line, text in _comments(source)
          if text in kept and STALE.search(text)
          and not any(start <= line <= end for start, end in bodies)]


def step_bodies(source: str, ports) -> list[tuple[int, int]]:
  """The line ranges of the functions the steps map, in `source`."""
  mapped = {getattr(p, "fun_code", "") for p in ports}
  names = {m.split("(")[-1].split(",")[0].strip() for m in mapped}
  return [(n.lineno, n.end_lineno) for n in ast.walk(ast.parse(source))
          if isinstance(n, ast.FunctionDef) and n.name in names]


def findings(source: str, code: str, ports, wrapper=None) -> list[Finding]:
  """The `left` findings of a written global step."""
  del wrapper
  out = [Finding(line, Kind.LEFT, (
      f"{name} is no longer used: the global step reads it nowhere (it fed "
      "pmap's stacked layout); remove it unless code outside this file "
      "reads it")) for name, line in dead_names(source, code)]
  out += [Finding(line, Kind.LEFT, (
      f"a comment about pmap's layout, now stale: {text.strip()!r} (the "
      "state is one value placed with P(), the batch one global array)"))
          for line, text in stale_comments(source, code,
                                           step_bodies(source, ports))]
  return out
