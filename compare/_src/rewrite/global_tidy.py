"""What the global step leaves dead or stale, named for a person to tidy.

The rewrite changes only what it must, so code that fed pmap's layout stays
where it was: a `split` nothing calls, the `n_devices` only `split` read, a
comment about the extra leading dimension. What flows in: the program's
source and the written one; out: `left` findings by line of the program.
Nothing is removed: a name may be read by code out of view (a test, another
module), and a comment is the team's.
"""

import ast
import io
import re
import tokenize

from compare._src.rewrite.rewrite_pmap import Finding

# Words of a comment about pmap's layout that the global step changed.
STALE = re.compile(r"\[0\]|leading (dimension|axis)|first device|replicat|"
                   r"(each|every|per) device|stacked", re.I)
LEFT = "left"


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
  out = [Finding(line, LEFT, (
      f"{name} is no longer used: the global step reads it nowhere (it fed "
      "pmap's stacked layout); remove it unless code outside this file "
      "reads it")) for name, line in dead_names(source, code)]
  out += [Finding(line, LEFT, (
      f"a comment about pmap's layout, now stale: {text.strip()!r} (the "
      "state is one value placed with P(), the batch one global array)"))
          for line, text in stale_comments(source, code,
                                           step_bodies(source, ports))]
  return out
