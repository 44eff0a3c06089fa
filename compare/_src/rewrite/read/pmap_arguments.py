"""What the rewrite reads of a pmap's arguments, as Python values.

The axis it names: a string literal, or a module-level name bound once to
one (`AXIS = "batch"`, a constant teams keep beside their steps), or such a
constant of a module it imports (`from mypkg import axes` ... `axes.BATCH`,
or `from mypkg.axes import BATCH`), read from that module's source beside
the file (nothing is imported or run); any other expression is `"*"` (any collective may name it, and the global step cannot
write the mesh's axis by name). `in_axes`/`out_axes` and argnums: literals
only. The arguments of a pmap by name (`arguments`), or why a person reads
them; the axes a pmap-building call names (`axis_nodes`); the names a mapped
function's expression reads (`mapped_names`).
"""

import dataclasses
import pathlib

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read.names import is_pmap
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind

# pmap's parameters, positional order first.
_POSITIONAL = ("fun", "axis_name")
_KNOWN = {"fun", "axis_name", "in_axes", "out_axes", "donate_argnums",
          "devices", "static_broadcasted_argnums", "axis_size", "backend"}
_FOR_A_PERSON = {
    "axis_size": "axis_size: pmap over a given axis size has no devices to "
    "build a mesh from",
    "backend": "backend: the mesh's devices choose the backend"}


@dataclasses.dataclass(frozen=True)
class Arguments:
  """A pmap's arguments as read: `named` by parameter (None where a person
  reads them: `finding` says why), and the `axis_name` node where the
  arguments name one (read even where a person then reads the rest)."""

  named: dict | None
  axis: cst.BaseExpression | None = None
  finding: Finding | None = None


def arguments(args, line: int) -> Arguments:
  """pmap's arguments `args` (LibCST `Arg`s) by name, at `line`."""
  named = {}
  for i, arg in enumerate(args):
    if arg.star:
      return Arguments(None, finding=Finding(
          line, Kind.PERSON, "pmap's arguments unpacked with */**: cannot "
          "read them"))
    key = arg.keyword.value if arg.keyword else (
        _POSITIONAL[i] if i < len(_POSITIONAL) else None)
    if key not in _KNOWN:
      return Arguments(None, finding=Finding(
          line, Kind.PERSON, f"pmap argument {key or i} is not one pmap "
          "takes"))
    named[key] = arg.value
  axis = named.get("axis_name")
  for key, why in _FOR_A_PERSON.items():
    if key in named:
      return Arguments(None, axis, Finding(line, Kind.PERSON, why))
  return Arguments(named, axis)


def axis_nodes(call, aliases) -> list:
  """The axes a pmap-building call names (keyword, or second positional
  argument of jax.pmap), as nodes."""
  args = list(call.args) if is_pmap(call.func, aliases) else list(
      call.func.args)
  return [arg.value for i, arg in enumerate(args)
          if (arg.keyword and arg.keyword.value == "axis_name") or (
              not arg.keyword and i == 1 and is_pmap(call.func, aliases))]


def mapped_names(fun) -> frozenset[str]:
  """Every name a mapped function's expression names (`records.Port`)."""
  found = set()

  class Names(cst.CSTVisitor):

    def visit_Name(self, node):
      found.add(node.value)

  fun.visit(Names())
  return frozenset(found)


def module_strings(module: cst.Module, path: str | None = None
                   ) -> dict[str, str]:
  """`{NAME: value}` of the module's top-level `NAME = "..."` lines, and of
  the string constants it imports from modules found beside `path`
  (`{"alias.NAME": value}` for a module imported whole)."""
  found = _own_strings(module)
  for statement in module.body:
    if not isinstance(statement, cst.SimpleStatementLine):
      continue
    for small in statement.body:
      if isinstance(small, (cst.Import, cst.ImportFrom)):
        found.update(_imported(small, path))
  return found


def _own_strings(module: cst.Module) -> dict[str, str]:
  found = {}
  for statement in module.body:
    if not isinstance(statement, cst.SimpleStatementLine):
      continue
    for small in statement.body:
      if (isinstance(small, cst.Assign) and len(small.targets) == 1
          and isinstance(small.targets[0].target, cst.Name)
          and isinstance(small.value, cst.SimpleString)):
        found[small.targets[0].target.value] = small.value.evaluated_value
  return found


def _dotted(node) -> str:
  if isinstance(node, cst.Attribute):
    return f"{_dotted(node.value)}.{node.attr.value}"
  return node.value if isinstance(node, cst.Name) else ""


def _source_of(dotted: str, level: int, path: str | None):
  """The parsed module `dotted` (`level` dots up from `path`'s folder for a
  relative import), from the first folder it is found in: `path`'s folder
  and its parents, then the working directory. None if not found."""
  here = pathlib.Path(path).resolve().parent if path and path != (
      "<string>") else None
  if level:
    if here is None:
      return None
    roots = [here.parents[level - 2] if level > 1 else here]
  else:
    roots = ([here, *here.parents] if here else []) + [pathlib.Path.cwd()]
  relative = pathlib.Path(*dotted.split(".")) if dotted else pathlib.Path()
  for root in roots:
    for candidate in (root / relative.with_suffix(".py"),
                      root / relative / "__init__.py"):
      if dotted and candidate.is_file():
        try:
          return cst.parse_module(candidate.read_text())
        except (OSError, UnicodeDecodeError, cst.ParserSyntaxError):
          return None
  return None


def _imported(statement, path) -> dict[str, str]:
  """The string constants one import statement binds, by the name they are
  read through."""
  found = {}
  if isinstance(statement, cst.Import):
    for alias in statement.names:
      if alias.asname is None:
        continue  # `import a.b` is read as `a.b.NAME`: not followed
      module = _source_of(_dotted(alias.name), 0, path)
      if module is not None:
        local = alias.asname.name.value
        found.update({f"{local}.{name}": value
                      for name, value in _own_strings(module).items()})
    return found
  if isinstance(statement.names, cst.ImportStar):
    return found
  base = _dotted(statement.module) if statement.module else ""
  level = len(statement.relative)
  whole = _source_of(base, level, path) if base else None
  constants = _own_strings(whole) if whole is not None else {}
  for alias in statement.names:
    name = alias.name.value
    local = alias.asname.name.value if alias.asname else name
    if name in constants:
      found[local] = constants[name]  # from pkg.axes import BATCH
      continue
    module = _source_of(f"{base}.{name}" if base else name, level, path)
    if module is not None:  # from pkg import axes
      found.update({f"{local}.{key}": value
                    for key, value in _own_strings(module).items()})
  return found


def axis_value(node, strings: dict[str, str], scope) -> str:
  """The axis `node` (a pmap's `axis_name`) names, or "*".

  Args:
    node: the expression.
    strings: `module_strings` of its module.
    scope: its `metadata.ScopeProvider` scope (None where unknown).
  """
  if isinstance(node, cst.SimpleString):
    return node.evaluated_value
  if isinstance(node, cst.Name) and scope is not None and node.value in (
      strings) and node.value in scope:
    # Bound once, at module level: no local name or later line shadows it.
    assignments = scope[node.value]
    if len(assignments) == 1 and isinstance(
        next(iter(assignments)).scope, metadata.GlobalScope):
      return strings[node.value]
  if (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
      and scope is not None and _dotted(node) in strings
      and node.value.value in scope):
    # The module's name bound once, at module level (by its import).
    assignments = scope[node.value.value]
    if len(assignments) == 1 and isinstance(
        next(iter(assignments)).scope, metadata.GlobalScope):
      return strings[_dotted(node)]
  return "*"


def axes_literal(node):
  """0, None or a tuple of them as Python values; raises ValueError else."""
  if isinstance(node, cst.Name) and node.value == "None":
    return None
  if isinstance(node, cst.Integer):
    if node.evaluated_value != 0:
      raise ValueError(f"an axis of {node.value}, not 0 or None")
    return 0
  if isinstance(node, (cst.Tuple, cst.List)):
    return tuple(axes_literal(e.value) for e in node.elements)
  raise ValueError(f"`{cst.Module([]).code_for_node(node)}` is not a literal "
                   "0, None or a tuple of them")


def argnums(node) -> tuple[int, ...]:
  """A literal int or tuple of ints as a tuple; raises ValueError else."""
  if isinstance(node, cst.Integer):
    return (node.evaluated_value,)
  if isinstance(node, (cst.Tuple, cst.List)) and all(
      isinstance(e.value, cst.Integer) for e in node.elements):
    return tuple(e.value.evaluated_value for e in node.elements)
  raise ValueError(f"`{cst.Module([]).code_for_node(node)}` is not a literal "
                   "int or tuple of ints")
