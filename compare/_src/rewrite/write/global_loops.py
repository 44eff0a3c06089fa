"""Where a global step runs as pmap ran it, unchecked: loops out of view.

What comes in: a step's function (LibCST), the file's functions
(`global_written.definitions`) and its module. What goes out: why the
step's shard_map takes `check_vma=False`, naming the call and its line: a
loop of jax's (`lax.while_loop`, `fori_loop`, `scan`) in the step or a
function of the file it calls, or a call of a function of a module of the
program's own (imported by the file, not jax's, numpy's or a library's),
whose body is out of view; else None.

Why: under jax's check of varying values (`check_vma=True`, shard_map's
default) a loop whose carry starts as a value no device varies and comes
back as one each device's rows vary is refused ("... output types match
the corresponding input types"): flax lm1b's `temperature_sample` starts
its tokens as `jnp.zeros` and samples them from each device's logits. pmap
checks nothing of the kind; with `check_vma=False` the step runs as pmap
ran it. Issue 74 (lm1b at 558be01e^ through `--global`).
"""

import libcst as cst

from compare._src.rewrite.read.names import dotted
from compare._src.rewrite.read.names import nested_functions
from compare._src.rewrite.read.names import own_nodes

LOOPS = ("while_loop", "fori_loop", "scan")
# Import roots that are libraries, not the program's own modules.
LIBRARIES = frozenset((
    "jax", "jaxlib", "flax", "optax", "numpy", "scipy", "chex", "einops",
    "equinox", "orbax", "tensorflow", "tensorflow_datasets",
    "tensorflow_text", "tf", "tfds", "clu", "ml_collections", "absl",
    "functools", "itertools", "collections", "dataclasses", "typing",
    "math", "operator", "os", "sys", "time", "re", "json", "pathlib",
    "logging", "abc", "enum", "contextlib", "copy", "random"))


def own_modules(module) -> set[str]:
  """The names the file binds to modules of the program's own: `import X`
  and `from . import X` (or `from PKG import X` of a PKG not a library)."""
  found = set()

  class Imports(cst.CSTVisitor):

    def visit_Import(self, node):
      for alias in node.names:
        root = dotted(alias.name).split(".")[0]
        if root not in LIBRARIES and "." not in dotted(alias.name):
          found.add(alias.asname.name.value if alias.asname else root)

    def visit_ImportFrom(self, node):
      root = dotted(node.module).split(".")[0] if node.module else ""
      if root in LIBRARIES or isinstance(node.names, cst.ImportStar):
        return
      for alias in node.names:
        found.add(alias.asname.name.value if alias.asname
                  else dotted(alias.name))

  module.visit(Imports())
  return found


def unchecked(fn, functions, module, position) -> str | None:
  """Why `fn`'s step takes `check_vma=False` for a loop (module doc),
  else None (`position`: a node's line)."""
  found = _loop_call(fn, functions, own_modules(module), ())
  if found is None:
    return None
  name, node, own = found
  where = (f"{name}(...) (line {position(node)}), a function of the "
           "program's own in another file, out of view: it may run"
           if own else f"{name}(...) (line {position(node)}):")
  return (f"check_vma=False: the step calls {where} a loop whose carry "
          "starts as a value no device varies and comes back varying, "
          "which jax's check refuses and pmap never checked")


def _loop_call(fn, functions, own, seen):
  """`(name, call, own)` of the first loop call in `fn`, a function of
  the file it calls, or a def or lambda nested in it."""
  for call in own_nodes(fn, cst.Call):
    name = dotted(call.func)
    parts = name.split(".")
    if parts[-1] in LOOPS and len(parts) > 1:
      return name, call, False
    if (len(parts) == 2 and parts[0] in own and parts[1][:1].islower()):
      return name, call, True
    callee = functions.get(name)
    if callee is not None and callee is not fn and name not in seen:
      found = _loop_call(callee, functions, own, (*seen, name))
      if found:
        return found
  for inner in nested_functions(fn):
    found = _loop_call(inner, functions, own, seen)
    if found:
      return found
  return None

