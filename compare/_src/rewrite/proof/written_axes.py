"""The axes of a step `--global` wrote without helpers, read from its text.

`--prove` runs the written step on the Port's layout: what it still takes
in pmap's stacked layout (a parameter whose body takes pmap's view, `x =
jax.tree.map(lambda a: a[0], x)`) is stacked for it, and what it gives back
per device (`out_specs` `P(axis)`) is read so. What flows in: the written
file's text and the step's name (or a local pmap's written source); out:
`{"in_axes": ..., "out_axes": ...}` as pmap's.
"""

import ast


def axes_of_specs(spec, count=2):
  """pmap's axes of `count` values a spec (or a tuple of them) lays out:
  `P()` None (one value), `P(axis)` 0 (stacked per device)."""
  specs = spec.elts if isinstance(spec, ast.Tuple) else [spec] * count
  return tuple(None if isinstance(s, ast.Call) and not s.args else 0
               for s in specs)


def plain_axes(text: str, name: str | None, written: str | None) -> dict:
  """The axes of a step `--global` wrote without helpers
  (`global_plain`): its outputs' from `out_specs`; its arguments None (the
  state placed once, the global batch) but where its body takes pmap's
  view of one (`x = jax.tree.map(lambda a: a[0], x)`: given stacked)."""
  tree = ast.parse(text)
  shard_maps = [n for n in ast.walk(ast.parse(written) if written else tree)
                if isinstance(n, ast.Call) and any(
                    isinstance(a, ast.Attribute) and a.attr == "shard_map"
                    for a in [n.func, *n.args])]
  defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
          and n.name == name and n.decorator_list]
  if not defs and len(shard_maps) == 1 and shard_maps[0].args:
    # A local pmap's port: the function it maps, under a lambda (keyword
    # arguments: `global_keywords`) or a functools.partial.
    fun = shard_maps[0].args[0]
    if isinstance(fun, ast.Lambda) and isinstance(fun.body, ast.Call):
      fun = fun.body.func
    if isinstance(fun, ast.Call) and ast.unparse(fun.func) in (
        "functools.partial", "partial") and fun.args:
      fun = fun.args[0]
    if isinstance(fun, ast.Name):
      defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
              and n.name == fun.id]
      body = {k.arg: k.value for k in shard_maps[0].keywords}
      if "out_specs" in body and len(defs) == 1:
        return _axes(defs[0], body)
  if defs:
    shard_maps = [d for d in defs[0].decorator_list if isinstance(
        d, ast.Call) and any(isinstance(a, ast.Attribute)
                             and a.attr == "shard_map" for a in d.args)]
  elif name is not None:
    assigned = [n.value for n in tree.body if isinstance(n, ast.Assign)
                and [getattr(t, "id", None) for t in n.targets] == [name]]
    shard_maps = [n for a in assigned for n in ast.walk(a)
                  if isinstance(n, ast.Call) and isinstance(
                      n.func, ast.Attribute) and n.func.attr == "shard_map"]
  if len(shard_maps) != 1:
    return {}
  spec = {k.arg: k.value for k in shard_maps[0].keywords}
  if "out_specs" not in spec:
    return {}
  return _axes(defs[0] if defs else None, spec)


def _axes(fn, spec) -> dict:
  """The axes of a step mapping `fn` (or None) with shard_map's `spec`."""
  params = [a.arg for a in fn.args.args] if fn else []
  viewed = {stmt.targets[0].id for stmt in (fn.body if fn else [])
            if isinstance(stmt, ast.Assign) and "lambda a: a[0]"
            in ast.unparse(stmt.value)}
  return {"in_axes": tuple(0 if p in viewed else None
                           for p in params[:2]) or (None, None),
          "out_axes": axes_of_specs(spec["out_specs"])}
