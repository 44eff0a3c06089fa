"""The first step's output read back as the pmap program it came from.

`python -m compare.rewrite --global` takes a pmap program or the first
step's output. For the latter, each port the first step wrote,

    _pmap_call(lambda fun: jax.jit(_pmap_keywords(jax.shard_map(
        _pmap_view(fun, in_axes=A, out_axes=O), mesh=_pmap_mesh(AXIS[, D]),
        ...)), donate_argnums=N), F, AXIS, in_axes=A[, devices=D])

is read back as `jax.pmap(F, axis_name=AXIS, in_axes=A, out_axes=O,
donate_argnums=N[, devices=D])`, each `_pmap_put_replicated(...)` and
`_pmap_put_sharded(...)` as the `jax.device_put_replicated(...)` and
`jax.device_put_sharded(...)` it replaced, and the helpers it added are
taken out, so
that both steps are taken from one reading. `line_of` maps the lines of the
text read back to the file's own, for the report.
"""

import difflib
import re

import libcst as cst

from compare._src.rewrite import rewrite_helpers
from compare._src.rewrite.read import names
from compare._src.rewrite.read import stacked_calls

MARK = "# compare.rewrite's helpers"


class UndoError(ValueError):
  """A port of the first step whose shape is not the one it writes."""


def _argument(call, name):
  return next((a.value for a in call.args
               if a.keyword and a.keyword.value == name), None)


class _Undo(cst.CSTTransformer):
  """Each `_pmap_call(...)` port back to its `jax.pmap(...)`."""

  def leave_Call(self, original, updated):
    if names.dotted(updated.func) != "_pmap_call":
      return updated
    code = names.code_of
    try:
      jit = updated.args[0].value.body
      keywords = jit.args[0].value
      shard_map = keywords.args[0].value
      view = shard_map.args[0].value
      mesh = _argument(shard_map, "mesh")
      assert names.dotted(keywords.func) == "_pmap_keywords"
      assert names.dotted(view.func) == "_pmap_view"
      assert names.dotted(mesh.func) == "_pmap_mesh"
    except (AttributeError, IndexError, AssertionError):
      raise UndoError(
          "a _pmap_call(...) port the first step does not write "
          "(static arguments, or edited by hand): give --global the pmap "
          "program itself") from None
    parts = [code(updated.args[1].value),
             f"axis_name={code(mesh.args[0].value)}",
             f"in_axes={code(_argument(view, 'in_axes'))}",
             f"out_axes={code(_argument(view, 'out_axes'))}"]
    donate = _argument(jit, "donate_argnums")
    if donate is not None:
      parts.append(f"donate_argnums={code(donate)}")
    if len(mesh.args) > 1:  # `tuple(devices)`
      parts.append(f"devices={code(mesh.args[1].value.args[0].value)}")
    return cst.parse_expression(f"jax.pmap({', '.join(parts)})")

  def leave_Module(self, original, updated):
    return updated.with_changes(body=_decorated(updated.body))

  def leave_IndentedBlock(self, original, updated):
    return updated.with_changes(body=_decorated(updated.body))


def _decorated(body) -> list:
  """`def f` then `f = jax.pmap(f, ...)` (the first step's port of a pmap
  decorator, read back) as the decorator it was, so both steps write it
  alike: `@functools.partial(jax.pmap, ...)`."""
  out = []
  for statement in body:
    previous = out[-1] if out else None
    small = (statement.body[0] if isinstance(statement,
                                             cst.SimpleStatementLine)
             and len(statement.body) == 1 else None)
    if (isinstance(previous, cst.FunctionDef) and not previous.decorators
        and isinstance(small, cst.Assign) and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and small.targets[0].target.value == previous.name.value
        and isinstance(small.value, cst.Call)
        and names.dotted(small.value.func) == "jax.pmap"
        and isinstance(small.value.args[0].value, cst.Name)
        and small.value.args[0].value.value == previous.name.value):
      rest = ", ".join(cst.Module([]).code_for_node(a).rstrip(", ")
                       for a in small.value.args[1:])
      out[-1] = previous.with_changes(decorators=[cst.Decorator(
          cst.parse_expression(f"functools.partial(jax.pmap, {rest})"))])
      continue
    out.append(statement)
  return out


def undone(source: str) -> str | None:
  """`source` as the pmap program the first step was given, or None where
  it is not the first step's output. Raises UndoError."""
  if "_pmap_call(" not in source or rewrite_helpers.HELPERS not in source:
    return None
  text = source.replace(rewrite_helpers.HELPERS, "").replace(
      rewrite_helpers.STATIC_HELPER, "").replace(
          rewrite_helpers.PUT_HELPER, "")
  for removed, helper in stacked_calls.REMOVED_PUTS.items():
    text = text.replace(f"{helper}(", f"{removed}(")
  text = "".join(line for line in text.splitlines(keepends=True)
                 if not line.rstrip().endswith(MARK))
  return cst.parse_module(text).visit(_Undo()).code


def line_of(source: str, read_back: str):
  """A function from a line of `read_back` to the line of `source` it
  comes from (the first line of a port read back: the port's own)."""
  lines = {}
  matcher = difflib.SequenceMatcher(None, read_back.splitlines(),
                                    source.splitlines(), autojunk=False)
  for tag, a0, a1, b0, _ in matcher.get_opcodes():
    for i in range(a0, a1):
      lines[i + 1] = b0 + (i - a0 if tag == "equal" else 0) + 1
  # A decorator read back (`_decorated`) is the port's own line there.
  back, given = read_back.splitlines(), source.splitlines()
  for i, text in enumerate(back[:-1]):
    name = re.match(r"\s*(?:async )?def (\w+)", back[i + 1])
    if text.lstrip().startswith("@functools.partial(jax.pmap") and name:
      port = next((j for j, line in enumerate(given) if line.lstrip()
                   .startswith(f"{name[1]} = _pmap_call(")), None)
      if port is not None:
        lines[i + 1] = port + 1
  return lambda line: lines.get(line, line)
