"""The written port of a pmap made inside a function, for `--prove`.

A pmap made inside a function (flax nlp_seq's `p_train_step`) is bound to
no name the written module has: the Port's `pmap_step` is a pmap of one of
the original's functions (or a `functools.partial` of one), made when the
Port was built. Its port is the one the writer recorded as mapping that
function (`records.Port.mapped`), found among the writer's records, not by
searching the text.

What comes in: the Port, the original file, the writer's records
(`records.Rewrite`) and the written module, imported (its helpers, its
constants, its functions as written). What goes out: the written step,
built around the Port's function, with the record it was written from.

The step is what the file says: its expression there (the one port call
that names the function) is compiled in the written module's namespace
with the Port's function in the function's place, so a spec changed by
hand in the file is what is proved (tests/test_rewrite_local_pmap.py).
The expression is taken from the parsed file by its shape and the
function's own parsed form; its layout is the writer's record.
"""

import ast
import functools
import pathlib
import sys

from compare._src.prove import port as port_module
from compare._src.rewrite import pipeline
from compare._src.rewrite.proof import on_port_layout

_PROVED = "_proved_function"  # the Port's function, in the written call


@functools.lru_cache(maxsize=4)
def _first_step(text: str, path: str):
  return pipeline.rewrite_source(text, path)


def first_step(source: pathlib.Path):
  """The first step's `Rewrite` of `source`, made once per text: the proof
  reads its records for the declared step, the local port and the cost."""
  return _first_step(source.read_text(), str(source))


def mapping(ports, name: str) -> list:
  """The recorded ports whose function names `name`."""
  return [p for p in ports if name in p.mapped]


def mapped_function(pmap_step, source: pathlib.Path):
  """`(the function, its name)` a pmap maps, where it is one of `source`'s
  functions (or a `functools.partial` of one); None otherwise."""
  fun = getattr(pmap_step, "__wrapped__", None)
  base = fun.func if isinstance(fun, functools.partial) else fun
  name = getattr(base, "__name__", None)
  module = sys.modules.get(getattr(base, "__module__", None))
  if name is None or pathlib.Path(getattr(module, "__file__", "") or "")\
      .resolve() != source.resolve():
    return None
  return fun, name


def _port_calls(tree) -> list:
  """The written file's port calls: `_pmap_call(...)` (the helpers), or
  `jax.jit(jax.shard_map(...))` (`--global` without them)."""
  calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
           and isinstance(n.func, ast.Name) and n.func.id == "_pmap_call"]
  return calls or [
      n for n in ast.walk(tree) if isinstance(n, ast.Call)
      and ast.unparse(n.func) == "jax.jit" and n.args
      and isinstance(n.args[0], ast.Call)
      and ast.unparse(n.args[0].func) == "jax.shard_map"]


class _Swap(ast.NodeTransformer):
  """The function's expression (`fun_code`, parsed) replaced by the Port's
  function, once."""

  def __init__(self, fun_code: str):
    self._fun = ast.dump(ast.parse(fun_code, mode="eval").body)
    self.swapped = False

  def visit(self, node):
    if not self.swapped and isinstance(node, ast.expr) and ast.dump(
        node) == self._fun:
      self.swapped = True
      return ast.copy_location(ast.Name(_PROVED, ast.Load()), node)
    return super().visit(node)


def _written_call(target: pathlib.Path, name: str):
  """The written file's port calls that name the function `name`."""
  return [c for c in _port_calls(ast.parse(target.read_text()))
          if any(isinstance(n, ast.Name) and n.id == name
                 for n in ast.walk(c))]


def step(port, source: pathlib.Path, rewrite, module):
  """`(the written step, its record, the pmap's line in the original)` of
  the Port's pmap, made inside a function; PortError where it is not one
  port of one pmap."""
  mapped = mapped_function(port.pmap_step, source)
  if mapped is None:
    raise port_module.PortError(
        f"--prove: the Port's pmap_step is neither a pmap {source} names "
        f"nor jax.pmap of one of its functions (or a functools.partial of "
        "one)")
  fun, name = mapped
  ports = mapping(first_step(source).ports, name)
  records = mapping(rewrite.ports, name)
  target = pathlib.Path(module.__file__)
  calls = _written_call(target, name)
  swap = _Swap(ports[0].fun_code) if len(ports) == 1 else None
  call = swap.visit(calls[0]) if swap and len(calls) == 1 else None
  if len(records) != 1 or call is None or not swap.swapped:
    raise port_module.PortError(
        f"--prove: {len(ports)} pmaps of {source} map {name} (lines "
        f"{[p.line for p in ports]}) and {target} has {len(calls)} "
        "ports of it; the proof needs exactly one of each")
  if "_pmap_call" not in rewrite.defined:
    # Written without helpers, its function may hold pmap's view in its
    # body now: the written module's, bound as the Port's is.
    own = getattr(module, name, None)
    if isinstance(fun, functools.partial) and own is not None:
      fun = functools.partial(own, *fun.args, **fun.keywords)
    elif own is not None:
      fun = own
  try:
    written = eval(compile(ast.fix_missing_locations(ast.Expression(call)),  # pylint: disable=eval-used
                           str(target), "eval"),
                   {**vars(module), _PROVED: fun})
  except NameError as err:
    raise port_module.PortError(
        f"--prove: the pmap at {source}:{ports[0].line} uses a local name "
        f"outside its function ({err})") from None
  return on_port_layout.with_bound_keywords(
      written, records[0].after_two, fun, port.mesh.size), records[0], \
      ports[0].line
