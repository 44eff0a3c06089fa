"""The global step as a JAX engineer writes it: one mesh, flat specs, no helper.

`rewrite_global` reads each step's layout; this module writes it. Per file:

    mesh = jax.sharding.Mesh([...every process's devices...], (axis,))
    replicated = jax.NamedSharding(mesh, jax.P())
    batch_sharding = jax.NamedSharding(mesh, jax.P(axis))

after the imports, and each pmap as `jax.jit(jax.shard_map(f, mesh=mesh,
in_specs=..., out_specs=...))` (decorators where the pmap was one). What
flows in: the module's LibCST tree, each step's layouts (`R`, `B`, `S`) and
its pmap's arguments; out: source text. `plain_reason` says why a file
cannot be written so (the first-step helpers then stay: `rewrite_global`).

Why each piece:
- the mesh holds every process's devices in process order, pmap's axis
  index: a mesh of this process's devices alone reduces over them alone
  (docs/jax-facts.md). It is built at import; a program that joins
  `jax.distributed` sets it after the join instead (`global_joined`).
- `check_vma=False` only where the step differentiates: under jax's check
  the gradient of a `P()` argument arrives summed over the mesh and the
  program's own `pmean` would leave N times the gradient (the gradient
  trap); and where it runs a loop out of the check's reach
  (`global_loops`); elsewhere jax's default.
- a value the body reduces over the axis (`pmean`, `psum`, `pmax`,
  `pmin`, `all_gather`) is the same on every device: it comes out `P()`,
  and its `x[0]` reads become `x` (`global_layouts`).
- pmap's per-device view only where a step takes or returns a value in
  pmap's stacked layout, as one line in its own body: a parameter
  `x = jax.tree.map(lambda a: a[0], x)`, an output `jax.tree.map(lambda
  a: jax.numpy.expand_dims(a, 0), y)` (`a[None]` fails on a Python
  number, and `psum(n, axis)` of an int is one). That edits the function,
  so only a function the pmap decorates (no other caller can see it) is
  written so.
"""

import libcst as cst

from compare._src.rewrite.layouts import B, R
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.read.names import dotted
from compare._src.rewrite.read.names import nested_functions
from compare._src.rewrite.read.names import own_nodes

REDUCERS = ("pmean", "psum", "pmax", "pmin", "all_gather")
GRADIENTS = ("grad", "value_and_grad", "vjp")
# The module-level names the writer binds, first choice first: a name the
# program already uses takes the next.
_NAMES = {"mesh": ("mesh", "device_mesh", "pmap_axis_mesh"),
          R: ("replicated", "replicated_sharding", "state_sharding"),
          B: ("batch_sharding", "rows_sharding", "data_sharding")}
UNSTACK = "jax.tree.map(lambda a: a[0], {})"
STACK = "jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0), {})"


def mapped_name(fun_code: str) -> str | None:
  """The function a pmap maps: `f` for `f` or `functools.partial(f, ...)`."""
  try:
    node = cst.parse_expression(fun_code)
  except cst.ParserSyntaxError:
    return None
  if isinstance(node, cst.Call) and dotted(node.func) in (
      "functools.partial", "partial") and node.args:
    node = node.args[0].value
  return node.value if isinstance(node, cst.Name) else None


def definitions(module) -> dict:
  """Every function the module defines, at any depth, by name (a name
  defined twice maps to None: which one runs is not in view)."""
  found = {}

  class Defs(cst.CSTVisitor):

    def visit_FunctionDef(self, node):
      found[node.name.value] = None if node.name.value in found else node

  module.visit(Defs())
  return found


def _is_reducer(node) -> bool:
  if not isinstance(node, cst.Call):
    return False
  name = dotted(node.func)
  tail = name.rsplit(".", 1)[-1]
  return tail in REDUCERS and (name == tail or ".lax." in f".{name}")


def reduced_outputs(fn) -> set:
  """Where `fn` (a step's function) returns a value it reduced over the
  axis: `{j}` of a returned tuple's elements, `{None}` for a single value;
  each a reducer's call or a name bound last, in the body itself, to one."""
  returns = own_nodes(fn, cst.Return)
  if len(returns) != 1 or returns[0].value is None:
    return set()
  value = returns[0].value
  last = {}  # name -> the last assignment that binds it, in source order
  for assign in own_nodes(fn, cst.Assign):
    for target in assign.targets:
      for name in ([target.target] if isinstance(target.target, cst.Name)
                   else [e.value for e in getattr(target.target, "elements",
                                                  [])]):
        if isinstance(name, cst.Name):
          last[name.value] = assign
  # A binding in the body itself (not in an `if` or a loop) of one name.
  top = {id(s.body[0]) for s in fn.body.body
         if isinstance(s, cst.SimpleStatementLine) and s.body}

  def reduced(node):
    if _is_reducer(node):
      return True
    assign = isinstance(node, cst.Name) and last.get(node.value)
    return bool(assign) and id(assign) in top and len(
        assign.targets) == 1 and isinstance(
            assign.targets[0].target, cst.Name) and _is_reducer(assign.value)

  if isinstance(value, cst.Tuple):
    return {j for j, e in enumerate(value.elements) if reduced(e.value)}
  return {None} if reduced(value) else set()


def gradient_line(fn, functions, position, seen=()) -> tuple | None:
  """`(call, line)` of a gradient `fn` takes (`jax.grad`, `value_and_grad`,
  `vjp`), in its body or a function of the file it calls, else None."""
  for call in own_nodes(fn, cst.Call):
    name = dotted(call.func)
    if name.rsplit(".", 1)[-1] in GRADIENTS:
      return name, position(call)
    callee = functions.get(name)
    if callee is not None and callee is not fn and name not in seen:
      found = gradient_line(callee, functions, position, (*seen, name))
      if found:
        return found
  # A gradient in a nested def or lambda of the step's own (a loss_fn).
  for inner in nested_functions(fn):
    found = gradient_line(inner, functions, position, seen)
    if found:
      return found
  return None

def names(module, needed) -> dict:
  """The names the writer binds at module level, none the program uses."""
  used = set()

  class Names(cst.CSTVisitor):

    def visit_Name(self, node):
      used.add(node.value)

  module.visit(Names())
  return {key: next(n for n in _NAMES[key] if n not in used)
          for key in ("mesh", *needed)}


def mesh_block(axis_code: str, bound: dict) -> str:
  """The module-level mesh and the shardings two placements or more name.
  `sorted` is stable: each process's devices in `jax.local_devices(p)`'s
  order, processes in order, as pmap lays its axis out."""
  lines = [
      "# pmap's devices: every process's, in process order (its axis index).",
      f"{bound['mesh']} = jax.sharding.Mesh(",
      f"    sorted(jax.devices(), key=lambda d: d.process_index), "
      f"({axis_code},))"]
  for key, spec in ((R, "jax.P()"), (B, f"jax.P({axis_code})")):
    if key in bound:
      lines.append(f"{bound[key]} = jax.NamedSharding({bound['mesh']}, "
                   f"{spec})")
  return "\n".join(lines) + "\n"


def specs(kinds, axis_code: str) -> str:
  """Flat specs: one where every value shares it, else a tuple."""
  each = ["jax.P()" if k in (R, None) else f"jax.P({axis_code})"
          for k in kinds]
  if len(set(each)) == 1:
    return each[0]
  return "(" + ", ".join(each) + ")"


def wrapped(head: str, parts: list[str], indent: str, width=79) -> str:
  """`head(parts...)`, parts packed up to `width` from the head's line on,
  continued at `indent`."""
  lines, line = [], f"{head}("
  for i, part in enumerate(parts):
    piece = part + ("," if i < len(parts) - 1 else ")")
    first = piece.split("\n")[0]
    if line.strip() and len(line) + len(first) + 1 > width:
      lines.append(line.rstrip())
      line = indent
    line += ("" if line.endswith("(") or not line.strip() else " ") + piece
  lines.append(line)
  return "\n".join(lines)


def shard_map_parts(mesh_name, in_code, out_code, vma: bool) -> list[str]:
  """shard_map's keyword arguments; no `mesh=` where `mesh_name` is None
  (the mesh jax is set to: `global_joined`)."""
  return ([] if mesh_name is None else [f"mesh={mesh_name}"]) + [
      f"in_specs={in_code}",
          f"out_specs={out_code}"] + ([] if vma else ["check_vma=False"])


def step_expression(fun_code, parts, donate, width=79) -> str:
  """`jax.jit(jax.shard_map(fun, ...))` for an assigned pmap."""
  last = parts[-1] + ")" + ("" if donate is None
                            else f", donate_argnums={donate}")
  return wrapped("jax.jit(jax.shard_map", [fun_code, *parts[:-1], last],
                 "    ", width)


def step_decorators(parts, donate, width=79) -> list[str]:
  """The decorators of a pmap that was one: jit over shard_map."""
  jit = ("jax.jit" if donate is None else
         f"functools.partial(jax.jit, donate_argnums={donate})")
  return [jit, wrapped("functools.partial", ["jax.shard_map", *parts],
                       "    ", width - 1)]


def per_device(fn, stacked_args, stacked_outs):
  """`fn` with pmap's view written in its body: each parameter at
  `stacked_args` (positions) taken as its device's block without its axis
  of 1, each output at `stacked_outs` (tuple positions, or None for the
  one value) given one. None where its parameters or return cannot say."""
  params = fn.params.params
  if fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT) and any(
      i >= len(params) for i in stacked_args):
    return None
  lines = [f"{params[i].name.value} = "
           + UNSTACK.format(params[i].name.value) for i in stacked_args]
  returns = own_nodes(fn, cst.Return)
  if stacked_outs and (len(returns) != 1 or returns[0].value is None):
    return None

  class Stack(cst.CSTTransformer):

    def leave_Return(self, original, updated):
      if not stacked_outs or original is not returns[0]:
        return updated
      value = updated.value
      if None in stacked_outs:
        return updated.with_changes(value=cst.parse_expression(
            STACK.format(code_of(value))))
      if not isinstance(value, cst.Tuple):
        raise ValueError("not a tuple")
      return updated.with_changes(value=value.with_changes(elements=[
          e.with_changes(value=cst.parse_expression(STACK.format(
              code_of(e.value)))) if j in stacked_outs else e
          for j, e in enumerate(value.elements)]))

    def leave_FunctionDef(self, original, updated):
      return updated

  try:
    body = fn.visit(Stack())
  except ValueError:
    return None
  statements = list(body.body.body)
  at = 1 if statements and isinstance(statements[0], cst.SimpleStatementLine) \
      and isinstance(statements[0].body[0], cst.Expr) and isinstance(
          statements[0].body[0].value, cst.SimpleString) else 0
  why = "  # pmap's per-device view"
  added = [cst.parse_statement(line + (why if k == 0 else "") + "\n")
           for k, line in enumerate(lines)]
  return body.with_changes(body=body.body.with_changes(
      body=statements[:at] + added + statements[at:]))


def reduced_by_line(wrapper, ports) -> dict:
  """`reduced_outputs` of each pmap's function, by the pmap's line."""
  functions = definitions(wrapper.module)
  found = {}
  for port in ports:
    fn = functions.get(mapped_name(port.fun_code) or "")
    if fn is not None:
      found[port.line] = reduced_outputs(fn)
  return found
