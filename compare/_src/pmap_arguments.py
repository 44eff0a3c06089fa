"""What the rewrite reads of a pmap's arguments, as Python values.

The axis it names: a string literal, or a module-level name bound once to
one (`AXIS = "batch"`, a constant teams keep beside their steps); any other
expression is `"*"` (any collective may name it, and the global step cannot
write the mesh's axis by name). `in_axes`/`out_axes` and argnums: literals
only.
"""

import libcst as cst
from libcst import metadata


def module_strings(module: cst.Module) -> dict[str, str]:
  """`{NAME: value}` of the module's top-level `NAME = "..."` lines."""
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
