"""Scopes and bindings for the global step's reading (`global_reader`).

Each name a module binds, by function and line (`Assign`), the loops that
may carry a binding back to an earlier line, and the names a lambda or a
comprehension binds for itself.
"""

import dataclasses

import libcst as cst
from libcst import metadata

from compare._src.rewrite.layouts import S


@dataclasses.dataclass(frozen=True)
class Assign:
  """A name bound at `end` (the statement's last line): `kind` is R, B, S,
  "biter" (batches from a rewritten prefetch), ("out", step, j) or
  ("alias", node)."""

  line: int
  end: int
  kind: object


class Scopes(cst.CSTVisitor):
  """The bindings of every name, scope by scope (`global_reader.Reader`
  adds what the global step reads of them)."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,
                           metadata.ExpressionContextProvider)

  def __init__(self):
    super().__init__()
    self.assigns = {}     # (scope, name) -> [Assign]
    self.loops = {}       # scope -> [(start, end)]
    self.params = {}      # scope -> set of names
    self.parents = {}     # a function's scope -> the scope it is defined in
    # scope -> [(start, end)] of each block that may not run: an `if`'s
    # and an `else`'s body, a `try`'s body, handlers and `else`.
    self.suites = {}
    self._scope = ["<module>"]
    self._own = []  # the names each enclosing lambda/comprehension binds

  def _pos(self, node):
    return self.get_metadata(metadata.PositionProvider, node)

  def _line(self, node) -> int:
    return self._pos(node).start.line

  # A lambda's parameters and a comprehension's targets are its own: a
  # `lambda w, x: w * x` mapped by pmap reads no `w` of the function around.
  def visit_Lambda(self, node):
    self._own.append({p.name.value for p in (
        *node.params.params, *node.params.kwonly_params,
        *node.params.posonly_params)})

  def leave_Lambda(self, node):
    self._own.pop()

  def _comprehension(self, node):
    names, loop = set(), node.for_in
    while loop is not None:
      names |= set(self._names(loop.target))
      loop = loop.inner_for_in
    self._own.append(names)

  visit_ListComp = visit_SetComp = visit_DictComp = _comprehension
  visit_GeneratorExp = _comprehension

  def _left_comprehension(self, node):
    self._own.pop()

  leave_ListComp = leave_SetComp = leave_DictComp = _left_comprehension
  leave_GeneratorExp = _left_comprehension

  def _loop(self, node):
    pos = self._pos(node)
    self.loops.setdefault(self._scope[-1], []).append(
        (pos.start.line, pos.end.line))

  def visit_While(self, node):
    self._loop(node)

  def _suite(self, block):
    pos = self._pos(block)
    self.suites.setdefault(self._scope[-1], []).append(
        (pos.start.line, pos.end.line))

  def visit_If(self, node):
    self._suite(node.body)
    if isinstance(node.orelse, cst.Else):
      self._suite(node.orelse.body)  # an `elif` is an If of its own

  def visit_Try(self, node):
    self._suite(node.body)
    for handler in node.handlers:
      self._suite(handler.body)
    if node.orelse is not None:
      self._suite(node.orelse.body)

  def _names(self, target):
    """The names a target binds (`x`, `(x, y)`, `[x, *rest]`)."""
    if isinstance(target, cst.Name):
      return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
      return [n for e in target.elements for n in self._names(e.value)]
    if isinstance(target, cst.StarredElement):
      return self._names(target.value)
    return []

  def _bind(self, name, line, end, kind):
    self.assigns.setdefault((self._scope[-1], name), []).append(
        Assign(line, end, kind))

  def visit_Import(self, node):
    self._imported(node)

  def visit_ImportFrom(self, node):
    self._imported(node)

  def _imported(self, node):
    """An imported name: a host value or a module, never one the rewrite
    placed (S where a step takes it)."""
    if isinstance(node.names, cst.ImportStar):
      return
    line = self._line(node)
    for alias in node.names:
      name = (alias.asname.name if alias.asname else alias.name)
      if isinstance(name, cst.Name):
        self._bind(name.value, line, line, S)
