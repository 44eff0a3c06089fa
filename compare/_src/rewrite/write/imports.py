"""What a written module needs at its head: imports, helpers, the mesh.

What comes in: the written code and the module it was read from. What goes
out: the code with the imports it names that the file lacks, then either
the first step's helpers or the global step's module-level mesh, after the
file's own imports.
"""

import ast
import functools

import libcst as cst

from compare._src.rewrite import rewrite_helpers


def with_imports(code: str, module: cst.Module, static: bool,
                 put: bool = False) -> str:
  """`code` with the helpers' imports and the helpers after the imports."""
  have = {cst.Module([]).code_for_node(s).strip() for s in module.body
          if isinstance(s, cst.SimpleStatementLine)}
  needed = [line for line in ("import functools", "import jax",
                              "import numpy as np") if line not in have]
  lines = code.splitlines(keepends=True)
  last = 0
  for i, line in enumerate(lines):
    if line.startswith(("import ", "from ")) and not line.startswith(
        "from __future__"):
      last = i + 1
  head = "".join(lines[:last])
  if needed:
    head += "".join(f"{line}  # compare.rewrite's helpers\n"
                    for line in needed)
  helpers = (rewrite_helpers.HELPERS
             + (rewrite_helpers.STATIC_HELPER if static else "")
             + (rewrite_helpers.PUT_HELPER if put else ""))
  return head + helpers + "".join(lines[last:])


@functools.cache
def _functions(helpers: str) -> tuple[str, ...]:
  return tuple(n.name for n in ast.parse(helpers).body
               if isinstance(n, ast.FunctionDef))


def helpers_defined(static: bool, put: bool = False) -> tuple[str, ...]:
  """The names of the helpers `with_imports` adds (`records.Rewrite`'s
  `defined`), read from the helpers' own source."""
  return (_functions(rewrite_helpers.HELPERS)
          + (_functions(rewrite_helpers.STATIC_HELPER) if static else ())
          + (_functions(rewrite_helpers.PUT_HELPER) if put else ()))


def with_mesh(code: str, module: cst.Module, block: str,
              functools: bool) -> str:
  """`code` with the imports the global step names and its module-level
  mesh (`block`) after the file's imports."""
  have = {cst.Module([]).code_for_node(s).strip() for s in module.body
          if isinstance(s, cst.SimpleStatementLine)}
  needed = [line for line in (("import functools",) if functools else ())
            + ("import jax",) if line not in have]
  lines = code.splitlines(keepends=True)
  last = max((i + 1 for i, line in enumerate(lines) if line.startswith(
      ("import ", "from ")) and not line.startswith("from __future__")),
             default=0)
  return ("".join(lines[:last]) + "".join(f"{line}\n" for line in needed)
          + ("\n" + block if block else "") + "".join(lines[last:]))
