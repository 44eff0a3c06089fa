"""Names in a LibCST tree: dotted names, pmap and its aliases, its uses.

What comes in: a module (or a node) parsed by LibCST. What goes out: the
dotted name of an expression, whether it is `jax.pmap` (or a name bound to
it) or builds one (a call, a decorator, `functools.partial(jax.pmap, ...)`),
and the lines where pmap, or a call jax 0.10 removed, is used at all.
"""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import stacked_calls


def dotted(node) -> str:
  """`jax.lax.pmean` for the expression `jax.lax.pmean`, else ""."""
  if isinstance(node, cst.Name):
    return node.value
  if isinstance(node, cst.Attribute):
    head = dotted(node.value)
    return f"{head}.{node.attr.value}" if head else ""
  return ""


def code_of(node) -> str:
  """The source of a LibCST node, as the file writes it."""
  return cst.Module([]).code_for_node(node)


def is_pmap(node, aliases) -> bool:
  name = dotted(node)
  return name in aliases or name == "jax.pmap"


def is_partial(node) -> bool:
  """Whether `node` names functools.partial."""
  return dotted(node) in ("functools.partial", "partial")


def is_partial_pmap(expr, aliases) -> bool:
  """Whether `expr` is `functools.partial(jax.pmap, ...)`."""
  return (isinstance(expr, cst.Call) and is_partial(expr.func)
          and bool(expr.args) and is_pmap(expr.args[0].value, aliases))


def builds_pmap(node, aliases) -> bool:
  """Whether `node` calls jax.pmap or functools.partial(jax.pmap, ...)."""
  return isinstance(node, cst.Call) and (
      is_pmap(node.func, aliases) or is_partial_pmap(node.func, aliases))


def is_pmap_decorator(expr, aliases) -> bool:
  """Whether a decorator is jax.pmap or functools.partial(jax.pmap, ...)."""
  return is_pmap(expr, aliases) or is_partial_pmap(expr, aliases)


def pmap_aliases(module) -> set[str]:
  """Names bound to jax.pmap by `from jax import pmap [as NAME]`."""
  aliases = set()
  for statement in module.body:
    if not isinstance(statement, cst.SimpleStatementLine):
      continue
    for small in statement.body:
      if (isinstance(small, cst.ImportFrom) and small.module is not None
          and dotted(small.module) == "jax"
          and not isinstance(small.names, cst.ImportStar)):
        for alias in small.names:
          if alias.name.value == "pmap":
            aliases.add(alias.asname.name.value if alias.asname else "pmap")
  return aliases


class References(cst.CSTVisitor):
  """The lines where jax.pmap (or an alias) appears at all."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,)

  def __init__(self, aliases):
    super().__init__()
    self.aliases, self.lines = aliases, []
    self.removed = []  # lines naming a call jax 0.10 removed

  def _add(self, node):
    if is_pmap(node, self.aliases):
      self.lines.append(
          self.get_metadata(metadata.PositionProvider, node).start.line)
    elif dotted(node) in stacked_calls.REMOVED_PUTS:
      self.removed.append(
          self.get_metadata(metadata.PositionProvider, node).start.line)

  def visit_Attribute(self, node):
    self._add(node)

  def visit_Name(self, node):
    self._add(node)

  def visit_ImportFrom(self, node):
    return False  # `from jax import pmap` is not a use


def own_nodes(fn, kind) -> list:
  """The nodes of type `kind` in `fn`'s body, not in a nested def/lambda."""
  found = []

  class Own(cst.CSTVisitor):

    def on_visit(self, node):
      if isinstance(node, (cst.FunctionDef, cst.Lambda)) and node is not fn:
        return False
      if isinstance(node, kind):
        found.append(node)
      return True

  fn.visit(Own())
  return found


def nested_functions(fn) -> list:
  """The defs nested in `fn`'s body (a step's own `loss_fn`), outermost
  first, not those nested in them."""
  found = []

  class Inner(cst.CSTVisitor):

    def visit_FunctionDef(self, node):
      if node is not fn:
        found.append(node)
      return node is fn

  fn.visit(Inner())
  return found
