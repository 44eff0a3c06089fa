"""The pmap idioms the global step recognises, read off LibCST nodes.

`replicate` (flax's, and the pmap tutorial's `jnp.array([x] * n)`),
`common_utils.shard` (and the tutorial's reshape to `[devices, ...]`),
`unreplicate`, `x[0]` and `jax.tree.map(lambda y: y[0], x)`
(`compare._src.global_layouts` reads where they are).
"""

import libcst as cst

from compare._src import rewrite_pmap

_TREE_MAPS = ("jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map",
              "tree_map", "tree.map")


def code_of(node) -> str:
  return cst.Module([]).code_for_node(node)


def is_replicate_call(node) -> bool:
  """`jax_utils.replicate(x)` or the tutorial's
  `jax.tree.map(lambda x: jnp.array([x] * n), tree)` (`np.`/`jnp.`,
  `array`/`stack`)."""
  if not isinstance(node, cst.Call):
    return False
  name = rewrite_pmap.dotted(node.func)
  if name.endswith("replicate") and not name.endswith("unreplicate") and (
      "jax_utils" in name or name == "replicate"):
    return True
  if name in _TREE_MAPS and len(node.args) == 2 and isinstance(
      node.args[0].value, cst.Lambda):
    body = code_of(node.args[0].value.body).replace(" ", "")
    param = node.args[0].value.params.params
    return len(param) == 1 and body.endswith(")") and any(
        body.startswith(f"{module}.{maker}([{param[0].name.value}]*")
        for module in ("np", "jnp", "numpy") for maker in ("array", "stack"))
  return False


def is_shard_call(node, splitters) -> bool:
  """`common_utils.shard(x)`, or a call of one of `splitters` (a function
  whose body is the tutorial's `arr.reshape(n, arr.shape[0] // n, ...)`)."""
  if not isinstance(node, cst.Call):
    return False
  name = rewrite_pmap.dotted(node.func)
  return name.endswith("common_utils.shard") or name in splitters


def is_unreplicate_call(node) -> bool:
  return isinstance(node, cst.Call) and rewrite_pmap.dotted(
      node.func).endswith("unreplicate") and len(node.args) == 1


def is_index0(node) -> bool:
  """`x[0]`."""
  return (isinstance(node, cst.Subscript) and len(node.slice) == 1
          and isinstance(node.slice[0].slice, cst.Index)
          and isinstance(node.slice[0].slice.value, cst.Integer)
          and node.slice[0].slice.value.value == "0")


def is_tree_index0(node) -> bool:
  """`jax.tree.map(lambda x: x[0], tree)`."""
  if not (isinstance(node, cst.Call) and rewrite_pmap.dotted(node.func)
          in _TREE_MAPS and len(node.args) == 2
          and isinstance(node.args[0].value, cst.Lambda)):
    return False
  fn = node.args[0].value
  return (len(fn.params.params) == 1 and is_index0(fn.body)
          and isinstance(fn.body.value, cst.Name)
          and fn.body.value.value == fn.params.params[0].name.value)


def splitter_name(node) -> str | None:
  """The name of a `def f(arr): return arr.reshape(n, arr.shape[0] // n,
  *arr.shape[1:])` (the pmap tutorial's `split`), else None."""
  if not isinstance(node, cst.FunctionDef) or len(node.params.params) != 1:
    return None
  arg = node.params.params[0].name.value
  body = [s for s in node.body.body if not (
      isinstance(s, cst.SimpleStatementLine)
      and isinstance(s.body[0], cst.Expr)
      and isinstance(s.body[0].value, cst.SimpleString))]
  if len(body) != 1:
    return None
  text = code_of(body[0]).replace(" ", "").strip()
  return node.name.value if (
      text.startswith(f"return{arg}.reshape(")
      and f"{arg}.shape[0]//" in text and f"*{arg}.shape[1:])" in text
  ) else None
