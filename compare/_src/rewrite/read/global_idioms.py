"""The pmap idioms the global step recognises, read off LibCST nodes.

`replicate` (flax's, and the pmap tutorial's `jnp.array([x] * n)`),
`common_utils.shard` (and the tutorial's reshape to `[devices, ...]`),
`unreplicate`, `x[0]` and `jax.tree.map(lambda y: y[0], x)`
(`plan.global_layouts` reads where they are).
"""

import re

import libcst as cst

from compare._src.rewrite.read import names
from compare._src.rewrite.read.names import code_of

TREE_MAPS = ("jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map",
              "tree_map", "tree.map")


class Known:
  """The program's own functions that are idioms, found as it is read:
  `splitters` (defs whose body is the tutorial's `arr.reshape(n,
  arr.shape[0] // n, ...)`), `replicators` (names bound to a lambda that
  copies its leaf per device, JAX's SPMD example's `replicate_array`) and
  the pipeline's batches (`pipeline_batches`)."""

  def __init__(self):
    self.splitters: set[str] = set()
    self.replicators: set[str] = set()
    # The pipeline's own batches (`pipeline_batches`): its generators of
    # them, the device counts it stacks by, and the ids of the nodes that
    # make one, placed where they are made.
    self.generators: set[str] = set()
    self.stackers: set[str] = set()
    self.counts: set[str] = set()
    self.made: set[int] = set()


def root_name(node):
  """The Name under `x.a.b` or `x["key"]`, else None."""
  while True:
    if isinstance(node, cst.Name):
      return node
    if isinstance(node, cst.Attribute):
      node = node.value
    elif (isinstance(node, cst.Subscript) and len(node.slice) == 1
          and isinstance(node.slice[0].slice, cst.Index)
          and isinstance(node.slice[0].slice.value, cst.SimpleString)):
      node = node.value
    else:
      return None


def is_replicator(fn) -> bool:
  """`lambda x: jnp.array([x] * n)` (the tutorial; `np.`/`jnp.`,
  `array`/`stack`) or `lambda x: np.broadcast_to(x, (n,) + x.shape)` (JAX's
  SPMD MNIST example)."""
  if not isinstance(fn, cst.Lambda) or len(fn.params.params) != 1:
    return False
  body = code_of(fn.body).replace(" ", "")
  x = fn.params.params[0].name.value
  modules = ("np", "jnp", "numpy")
  broadcast = next((body[len(f"{m}.broadcast_to({x},("):-len(
      f",)+{x}.shape)")] for m in modules if body.startswith(
          f"{m}.broadcast_to({x},(") and body.endswith(f",)+{x}.shape)")),
                   None)
  # A count written as a number is no device count (flax wmt's
  # `broadcast_to(x, (1,) + x.shape)` feeds a pmap over one device a host).
  return body.endswith(")") and (any(
      body.startswith(f"{module}.{maker}([{x}]*")
      for module in modules for maker in ("array", "stack")) or (
          bool(broadcast) and not broadcast.isdigit()))


def is_replicate_call(node, known: Known | None = None) -> bool:
  """`jax_utils.replicate(x)`, or `jax.tree.map(f, tree)` of a replicator
  `f` (`is_replicator`, or a name `known` binds to one)."""
  if not isinstance(node, cst.Call):
    return False
  name = names.dotted(node.func)
  if name.endswith("replicate") and not name.endswith("unreplicate") and (
      "jax_utils" in name or name == "replicate"):
    return True
  if name in TREE_MAPS and len(node.args) == 2 and not any(
      a.keyword or a.star for a in node.args):
    fn = node.args[0].value
    return is_replicator(fn) or (
        known is not None and isinstance(fn, cst.Name)
        and fn.value in known.replicators)
  return False


def is_shard_call(node, known: Known) -> bool:
  """`common_utils.shard(x)`, or a call of one of `known.splitters`."""
  if not isinstance(node, cst.Call):
    return False
  name = names.dotted(node.func)
  return name.endswith("common_utils.shard") or name in known.splitters


def is_unreplicate_call(node) -> bool:
  return isinstance(node, cst.Call) and names.dotted(
      node.func).endswith("unreplicate") and len(node.args) == 1


def is_index0(node) -> bool:
  """`x[0]`."""
  return (isinstance(node, cst.Subscript) and len(node.slice) == 1
          and isinstance(node.slice[0].slice, cst.Index)
          and isinstance(node.slice[0].slice.value, cst.Integer)
          and node.slice[0].slice.value.value == "0")


def is_tree_index0(node) -> bool:
  """`jax.tree.map(lambda x: x[0], tree)`."""
  if not (isinstance(node, cst.Call) and names.dotted(node.func)
          in TREE_MAPS and len(node.args) == 2
          and isinstance(node.args[0].value, cst.Lambda)):
    return False
  fn = node.args[0].value
  return (len(fn.params.params) == 1 and is_index0(fn.body)
          and isinstance(fn.body.value, cst.Name)
          and fn.body.value.value == fn.params.params[0].name.value)


def is_tree_to_global(node) -> bool:
  """`jax.tree.map(ocp.utils.fully_replicated_host_local_array_to_global_array,
  tree)` (flax wmt's, before Orbax saves a pmap state): of a
  value placed with `P()` it is that value again, on a mesh of
  `jax.devices()` (docs/jax-facts.md), so the read keeps it as it is."""
  return (isinstance(node, cst.Call) and names.dotted(node.func)
          in TREE_MAPS and len(node.args) == 2
          and not any(a.keyword or a.star for a in node.args)
          and names.dotted(node.args[0].value).endswith(
              "fully_replicated_host_local_array_to_global_array"))


def splitter_name(node) -> str | None:
  """The name of a function that splits a batch to `[devices, ...]`, else
  None: `def f(arr): return arr.reshape(n, arr.shape[0] // n,
  *arr.shape[1:])` (the pmap tutorial's `split`), or `def f(xs, ...):
  return jax.tree.map(lambda x: x.reshape((n, -1) + x.shape[1:]), xs)`
  (flax's `common_utils.shard`, as teams copy it). A split given to a
  pmap has the devices' count first, or pmap refuses it."""
  if not isinstance(node, cst.FunctionDef) or not node.params.params:
    return None
  arg = node.params.params[0].name.value
  body = [s for s in node.body.body if not (
      isinstance(s, cst.SimpleStatementLine)
      and isinstance(s.body[0], cst.Expr)
      and isinstance(s.body[0].value, cst.SimpleString))]
  if len(body) != 1:
    return None
  text = code_of(body[0]).replace(" ", "").strip()
  if len(node.params.params) == 1 and (
      text.startswith(f"return{arg}.reshape(")
      and f"{arg}.shape[0]//" in text and f"*{arg}.shape[1:])" in text):
    return node.name.value
  tree_map = re.fullmatch(
      rf"return({'|'.join(re.escape(m) for m in TREE_MAPS)})\(lambda(\w+):"
      rf"(\w+)\.reshape\(\([\w.]+(?:\(\))?,-1\)\+(\w+)\.shape\[1:\]\),"
      rf"{arg}\)",
      re.sub(r"\s+", "", text))
  if tree_map and tree_map[2] == tree_map[3] == tree_map[4]:
    return node.name.value
  return None


def is_prefetch(node) -> bool:
  """`prefetch_to_device(batches, n)`, its batches given first by position:
  the global step places each batch it yields (`rewrite_global`)."""
  return (isinstance(node, cst.Call) and names.dotted(
      node.func).endswith("prefetch_to_device") and bool(node.args)
          and node.args[0].keyword is None and not node.args[0].star)


def static_argnums(args) -> tuple[int, ...]:
  """pmap's `static_broadcasted_argnums` among `args` (a literal; the
  first step refuses any other)."""
  for arg in args:
    if arg.keyword and arg.keyword.value == "static_broadcasted_argnums":
      value = arg.value
      if isinstance(value, cst.Integer):
        return (value.evaluated_value,)
      if isinstance(value, (cst.Tuple, cst.List)):
        return tuple(e.value.evaluated_value for e in value.elements
                     if isinstance(e.value, cst.Integer))
  return ()
