"""Batches the team's own input pipeline makes: generators, stacked rows.

What comes in: a module parsed by LibCST and the idioms already known
(`global_idioms.Known`). What goes out: the program's batch generators
(functions whose every `yield` is a batch the global step places) and the
expressions that stack a batch `[devices, per_device, ...]` by hand, with
the rows they stack (`rows_of`), which the writer places as the global
batch at the place it is made.

Why: a pmap program's pipeline hands its step batches stacked per device,
made by `common_utils.shard` or by the team itself (a numpy reshape to
`[jax.local_device_count(), 16, 8]`, a stack of per-device batches, as
tf.data's `.batch(jax.local_device_count())` after the per-device
`.batch`). The global step takes each process's rows instead, placed with
`jax.make_array_from_process_local_data`; every process's rows in process
order are pmap's devices' blocks in axis order, so each device holds the
rows pmap gave it. Written where the batch is made, a generator of such
batches yields global batches, and its callers read them as such.
"""

import libcst as cst

from compare._src.rewrite.read import global_idioms
from compare._src.rewrite.read import names
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.read.names import own_nodes

# A stack of per-device batches: its rows are their concatenation.
_STACKS = ("np.stack", "numpy.stack", "onp.stack")
# The device count a pipeline stacks by: pmap maps this process's devices.
_COUNTS = ("jax.local_device_count",)



def count_names(module) -> set[str]:
  """Names the file binds once, to `jax.local_device_count()` (or
  `len(jax.local_devices())`), and to nothing else."""
  bound, counts = {}, set()

  class Bound(cst.CSTVisitor):

    def visit_Assign(self, node):
      for target in node.targets:
        for name in _target_names(target.target):
          bound[name] = bound.get(name, 0) + 1
          if isinstance(target.target, cst.Name) and is_count(node.value):
            counts.add(name)

    def visit_Param(self, node):
      bound[node.name.value] = bound.get(node.name.value, 0) + 2

  module.visit(Bound())
  return {name for name in counts if bound[name] == 1}


def _target_names(target) -> list[str]:
  if isinstance(target, cst.Name):
    return [target.value]
  if isinstance(target, (cst.Tuple, cst.List)):
    return [n for e in target.elements for n in _target_names(e.value)]
  return []


def is_count(node, counts=()) -> bool:
  """`jax.local_device_count()`, `len(jax.local_devices())`, or a name of
  `counts`."""
  if isinstance(node, cst.Name):
    return node.value in counts
  if not isinstance(node, cst.Call):
    return False
  name = names.dotted(node.func)
  if name in _COUNTS and not node.args:
    return True
  return (name == "len" and len(node.args) == 1 and isinstance(
      node.args[0].value, cst.Call) and names.dotted(
          node.args[0].value.func) == "jax.local_devices")


def _reshape_dims(node):
  """`(array code, dims)` of `a.reshape(d0, d1, ...)`, `a.reshape((d0,
  d1, ...))` or `np.reshape(a, (d0, d1, ...))`, else None."""
  if not isinstance(node, cst.Call) or any(
      a.keyword or a.star for a in node.args):
    return None
  name = names.dotted(node.func)
  if name in ("np.reshape", "numpy.reshape") and len(node.args) == 2:
    array, shape = node.args[0].value, node.args[1].value
    dims = getattr(shape, "elements", None)
    return None if dims is None else (array, [e.value for e in dims], name)
  if not (isinstance(node.func, cst.Attribute)
          and node.func.attr.value == "reshape" and node.args):
    return None
  array = node.func.value
  if len(node.args) == 1 and isinstance(node.args[0].value, cst.Tuple):
    dims = [e.value for e in node.args[0].value.elements]
  else:
    dims = [a.value for a in node.args]
  return array, dims, None


def rows_of(node, counts) -> str | None:
  """The code of the rows a batch stacked `[devices, per_device, ...]`
  here holds, `[devices * per_device, ...]`, else None:
  `a.reshape(n, b, *rest)` with `n` this process's device count ->
  `a.reshape(-1, *rest)` (or `np.reshape`'s). Each device's block is
  the same rows."""
  found = _reshape_dims(node)
  if found is not None:
    array, dims, function = found
    if len(dims) < 2 or any(isinstance(d, cst.StarredElement)
                            for d in dims[:2]) or not is_count(dims[0],
                                                               counts):
      return None
    rest = ", ".join(["-1", *(code_of(d) for d in dims[2:])])
    if function:
      return f"{function}({code_of(array)}, ({rest},))" if len(
          dims) == 2 else f"{function}({code_of(array)}, ({rest}))"
    return f"{code_of(array)}.reshape({rest})"
  return None


def is_stack(node) -> bool:
  """`np.stack(xs)`, or `jax.tree.map(lambda *xs: np.stack(xs), *group)`:
  elements stacked on a new leading axis."""
  if not isinstance(node, cst.Call):
    return False
  name = names.dotted(node.func)
  if name in _STACKS:
    return bool(node.args)
  if name not in global_idioms.TREE_MAPS or not node.args or not isinstance(
      node.args[0].value, cst.Lambda):
    return False
  body = node.args[0].value.body
  return isinstance(body, cst.Call) and names.dotted(body.func) in _STACKS


def stackers(module) -> set[str]:
  """The file's generators (defined once) that yield a stack of the
  elements they group (`is_stack`): a numpy `.batch(size)`."""
  defs = {}

  class Defs(cst.CSTVisitor):

    def visit_FunctionDef(self, node):
      defs.setdefault(node.name.value, []).append(node)

  module.visit(Defs())
  return {name for name, (fn, *more) in defs.items() if not more and any(
      y.value is not None and is_stack(y.value)
      for y in own_nodes(fn, (cst.Yield,)))}


def is_device_batched(node, known) -> bool:
  """`batch(elements, jax.local_device_count())` of a stacking generator
  (`stackers`): one per-device batch a device, stacked `[devices,
  per_device, ...]` (tf.data's `.batch(jax.local_device_count())` after
  the per-device `.batch`)."""
  return (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
          and node.func.value in known.stackers and any(
              is_count(a.value, known.counts) for a in node.args))


def is_shard_map(node, known) -> bool:
  """`map(common_utils.shard, batches)` (or of the file's splitter): each
  batch made as it is read."""
  return (isinstance(node, cst.Call) and names.dotted(node.func) == "map"
          and len(node.args) == 2 and not any(
              a.keyword or a.star for a in node.args)
          and (names.dotted(node.args[0].value).endswith(
              "common_utils.shard") or names.dotted(node.args[0].value)
               in known.splitters))


def is_made(node, known, counts) -> bool:
  """A batch the global step places where it is made: `shard(...)` (or a
  splitter of the file's) or a batch stacked by hand (`rows_of`)."""
  return global_idioms.is_shard_call(node, known) or (
      rows_of(node, counts) is not None)


def _yielded(fn, value, known, counts) -> list | None:
  """The made nodes behind one yielded `value` (a made batch, a tuple of
  them, a name `fn` binds only to one), else None."""
  if isinstance(value, cst.Tuple):
    parts = [_yielded(fn, e.value, known, counts) for e in value.elements]
    if any(p is None or isinstance(e.value, cst.Tuple)
           for p, e in zip(parts, value.elements)):
      return None
    return [n for p in parts for n in p]
  if is_made(value, known, counts):
    return [value]
  if not isinstance(value, cst.Name):
    return None
  name = value.value
  params = {p.name.value for p in (*fn.params.params,
                                   *fn.params.kwonly_params)}
  binds = [a for a in own_nodes(fn, cst.Assign)
           if any(name in _target_names(t.target) for t in a.targets)]
  others = [n for n in own_nodes(fn, (cst.For, cst.AugAssign, cst.AnnAssign,
                                 cst.NamedExpr)) if name in _target_names(
                                     n.target)] + [
      w for w in own_nodes(fn, (cst.WithItem,)) if w.asname is not None
      and name in _target_names(w.asname.name)]
  if (name in params or others or not binds or any(
      len(a.targets) != 1 or not isinstance(a.targets[0].target, cst.Name)
      or not is_made(a.value, known, counts) for a in binds)):
    return None
  return [a.value for a in binds]


def generators(module, known) -> tuple[set[str], set[int], set[int]]:
  """`(generators' names, ids of the made nodes they yield, ids of the
  generator calls they return)`: each function of the file (defined once)
  whose every `yield` gives a made batch (`is_made`), a tuple of them, or
  a name it binds only to one, and each that returns only such a
  generator's iterator (`_iterates`)."""
  counts = known.counts
  defs = {}

  class Defs(cst.CSTVisitor):

    def visit_FunctionDef(self, node):
      defs.setdefault(node.name.value, []).append(node)
      name = global_idioms.splitter_name(node)
      if name:
        known.splitters.add(name)

  module.visit(Defs())
  found, made = set(), set()
  for name, (fn, *more) in defs.items():
    yields = own_nodes(fn, (cst.Yield,))
    if more or not yields or any(
        y.value is None or isinstance(y.value, cst.From) for y in yields):
      continue
    nodes = [_yielded(fn, y.value, known, counts) for y in yields]
    if any(n is None for n in nodes):
      continue
    found.add(name)
    made.update(id(n) for ns in nodes for n in ns)
  returned = set()
  for name, (fn, *more) in defs.items():
    # A function that returns the pipeline (flax's `create_input_iter`).
    returns = [r.value for r in own_nodes(fn, (cst.Return,))]
    if not more and returns and name not in found and all(
        _iterates(r, known, found) for r in returns):
      found.add(name)
      made.update(id(r) for r in returns if is_device_batched(r, known))
      returned.update(id(r.args[0].value if global_idioms.is_prefetch(r)
                         else r) for r in returns)
  return found, made, returned


def _iterates(node, known, found) -> bool:
  """`node` is an iterator of global batches once written: a batch
  generator's call, a device-batched one, or a prefetch of either."""
  if global_idioms.is_prefetch(node):
    node = node.args[0].value
  return is_device_batched(node, known) or (
      isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
      and node.func.value in found)
