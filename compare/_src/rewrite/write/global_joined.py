"""The mesh of a program that joins `jax.distributed`: set once it has joined.

A module-level `Mesh(jax.devices(), ...)` starts the backend at import,
before the program's `jax.distributed.initialize`, which then fails (and a
mesh of the devices seen before the join would be one process's). So a file
that joins is written as JAX's own docs write such programs: each step a
`jax.jit(jax.shard_map(f, in_specs=..., out_specs=...))` with no `mesh=`
(shard_map takes the mesh jax is set to when it traces, at the first call),
each placement naming its `jax.P(...)` alone (`device_put` and
`make_array_from_process_local_data` take it on the set mesh), and one line
after the join:

    jax.set_mesh(jax.sharding.Mesh(
        sorted(jax.devices(), key=lambda d: d.process_index), (axis,)))

Where it goes: after the statement that joins, at the level that runs on
every path. A join inside an `if` (joined only when the environment names
a job) is followed by the mesh after that `if`, so the one-process run sets
it too; a join directly in a function, the module, or the body of `if
__name__ == "__main__":` is followed by it there. What flows in: the
rewritten source text and pmap's axis; out: the text with the line, and
the line it follows.
"""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import names

JOIN = "jax.distributed.initialize"
_STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)


def joins(source: str) -> bool:
  """Whether the file calls `jax.distributed.initialize` (by that name)."""
  return JOIN in source


def _is_main_guard(node) -> bool:
  return isinstance(node, cst.If) and "__name__" in cst.Module(
      []).code_for_node(node.test) and "__main__" in cst.Module(
          []).code_for_node(node.test)


class _Joins(cst.CSTVisitor):
  """The ancestors (statements and blocks' owners) of each join call."""

  def __init__(self):
    self.stack, self.found = [], []

  def on_visit(self, node):
    if isinstance(node, cst.Call) and names.dotted(node.func) == JOIN:
      self.found.append(list(self.stack))
    if isinstance(node, (cst.Module, cst.FunctionDef, cst.Else,
                         cst.ExceptHandler, cst.Finally, *_STATEMENTS)):
      self.stack.append(node)
    return True

  def on_leave(self, original):
    if self.stack and self.stack[-1] is original:
      self.stack.pop()


def _after(ancestors):
  """The statement the mesh follows, or a str saying why there is none."""
  statement = ancestors[-1]
  for owner in reversed(ancestors[:-1]):
    if isinstance(owner, cst.Else):
      continue  # an `if`'s else: its owner is the `if`, read next
    if isinstance(owner, cst.If) and not _is_main_guard(owner):
      statement = owner  # joined on one path: the mesh after the `if`
      continue
    if isinstance(owner, (cst.Module, cst.FunctionDef, cst.If, cst.With)):
      return statement
    return (f"it joins jax.distributed inside a "
            f"{type(owner).__name__.lower()} block: where the mesh can be "
            "set on every path is not in view")
  return statement


def set_mesh_lines(axis_code: str, indent: str) -> list[str]:
  """The lines that set the mesh, at `indent`."""
  devices = "sorted(jax.devices(), key=lambda d: d.process_index),"
  axes = f"({axis_code},)))"
  one = len(indent) + 4 + len(devices) + 1 + len(axes) <= 79
  return [f"{indent}{line}" for line in (
      "# pmap's devices: every process's, in process order (its axis "
      "index),",
      "# jax's mesh from here on: the steps' shard_map and the placements "
      "take it.",
      "jax.set_mesh(jax.sharding.Mesh(",
      *([f"    {devices} {axes}"] if one else [f"    {devices}",
                                                f"    {axes}"]))]


def where(code: str):
  """`(line, indent)`: the last line of the statement the mesh follows and
  that statement's indentation; or a str saying why the file cannot be
  written so."""
  wrapper = metadata.MetadataWrapper(cst.parse_module(code))
  found = _Joins()
  wrapper.visit(found)
  if len(found.found) != 1:
    return (f"it calls {JOIN} {len(found.found)} times: which one joins "
            "first is not in view")
  after = _after(found.found[0])
  if isinstance(after, str):
    return after
  positions = wrapper.resolve(metadata.PositionProvider)
  position = positions[after]
  function = next((a for a in reversed(found.found[0])
                   if isinstance(a, cst.FunctionDef)), None)
  if function is not None and any(
      positions[r].start.line < position.end.line
      for r in _own_returns(function)):
    return (f"{function.name.value} can return before its join: the mesh "
            "set after the join would not be set on that path")
  return position.end.line, " " * position.start.column


def _own_returns(function):
  found = []

  class Returns(cst.CSTVisitor):

    def visit_FunctionDef(self, node):
      return node is function

    def visit_Lambda(self, node):
      return False

    def visit_Return(self, node):
      found.append(node)

  function.visit(Returns())
  return found


def set_mesh_after_join(code: str, axis_code: str):
  """`(code with the mesh set after the join, the join's statement's last
  line in the input)`, or a str saying why not."""
  found = where(code)
  if isinstance(found, str):
    return found
  line, indent = found
  lines = code.splitlines(keepends=True)
  added = "".join(f"{text}\n" for text in set_mesh_lines(axis_code, indent))
  return "".join(lines[:line]) + added + "".join(lines[line:]), line
