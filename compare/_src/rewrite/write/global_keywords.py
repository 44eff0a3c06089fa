"""A step called with keyword arguments, written without a helper.

pmap maps a keyword argument over axis 0; `jax.jit(jax.shard_map(f, ...))`
takes none (`TypeError: ... unexpected keyword argument`, jax 0.10.2). flax
nlp_seq calls its step `p_train_step(state, batch, dropout_rng=dropout_rngs)`
with a key per device. Written as an engineer writes it: the call passes
them by position, after the positional ones, and the step maps a lambda
that names them and hands each to the function by keyword with pmap's
per-device view (`jax.tree.map(lambda a: a[0], kw)`: each device's block
without its axis of 1, as pmap gave it):

    p_train_step = jax.jit(jax.shard_map(
        lambda state, batch, dropout_rng: functools.partial(...)(
            state, batch, dropout_rng=jax.tree.map(lambda a: a[0],
                                                   dropout_rng)),
        in_specs=(jax.P(), jax.P("batch"), jax.P("batch")), ...))

Taken where every call of the step passes the same keyword names, no
`*`/`**`, and the mapped function (`f` or `functools.partial(f, k=v)`) is
defined in the file with positional parameters to name the positional
arguments; `plan` says why not otherwise (the file keeps the helpers).
What flows in: the module's LibCST tree and the steps; out: each step's
keyword names, the lambda's source, and the calls rewritten.
"""

import libcst as cst

from compare._src.rewrite.read import names

UNSTACK = "jax.tree.map(lambda a: a[0], {})"


def _calls(module, step_names) -> dict:
  """`name -> [each call's keyword names, in order]`; a call with */**
  as a None."""
  found = {}

  class Calls(cst.CSTVisitor):

    def visit_Call(self, node):
      name = names.dotted(node.func)
      if name in step_names:
        found.setdefault(name, []).append(
            None if any(a.star for a in node.args) else
            tuple(a.keyword.value for a in node.args if a.keyword))

  module.visit(Calls())
  return found


def _function_name(fun):
  if isinstance(fun, cst.Call) and names.dotted(fun.func) in (
      "functools.partial", "partial") and fun.args and all(
          a.keyword is not None for a in fun.args[1:]):
    fun = fun.args[0].value
  return fun.value if isinstance(fun, cst.Name) else None


def plan(module, steps, functions, pmap_funs) -> dict | str:
  """`{step name: (positional parameter names, keyword names)}` for each
  step called with keyword arguments, or a str saying why one cannot be
  written without the helper. `pmap_funs`: each step's mapped function
  node, by step name; `functions`: the file's definitions by name."""
  by_name = {s.name: s for s in steps.values()}
  found = {}
  for name, calls in _calls(module, set(by_name)).items():
    if not any(calls):
      continue
    if None in calls or len(set(calls)) != 1:
      return (f"{name} is called with */** or with other keyword arguments "
              "at different calls, which shard_map does not take (the "
              "helper _pmap_keywords maps them)")
    fn = functions.get(_function_name(pmap_funs.get(name)) or "")
    count = len(by_name[name].args) + len(by_name[name].static)
    params = [p.name.value for p in fn.params.params] if fn else []
    if by_name[name].static or fn is None or len(params) < count:
      return (f"{name} is called with keyword arguments, which shard_map "
              "does not take, and the function it maps is not defined in "
              "this file with parameters to name its positional arguments "
              "(the helper _pmap_keywords maps them)")
    found[name] = (tuple(params[:count]), calls[0])
  return found


def wrapped_function(fun_code: str, positional, keywords) -> str:
  """The lambda the step maps: the positional arguments as they are, each
  keyword one with pmap's per-device view."""
  given = [*positional, *(f"{k}={UNSTACK.format(k)}" for k in keywords)]
  return (f"lambda {', '.join([*positional, *keywords])}: {fun_code}(\n"
          + "\n".join(_lines(given, "        ")) + ")")


def _lines(parts, indent, width=72):
  """`parts` joined by commas, packed into lines of `width` at `indent`."""
  lines, line = [], indent
  for i, part in enumerate(parts):
    piece = part + ("," if i < len(parts) - 1 else "")
    if line.strip() and len(line) + 1 + len(piece) > width:
      lines.append(line.rstrip())
      line = indent
    line += ("" if not line.strip() else " ") + piece
  return lines + [line]


def by_position(call: cst.Call, keywords) -> cst.Call:
  """`call` with its keyword arguments passed by position, in the order of
  `keywords` (the lambda's)."""
  positional = [a for a in call.args if a.keyword is None]
  named = {a.keyword.value: a for a in call.args if a.keyword is not None}
  args = positional + [named[k].with_changes(
      keyword=None, equal=cst.MaybeSentinel.DEFAULT) for k in keywords]
  written = []
  for i, arg in enumerate(args):
    if i == len(args) - 1:  # the last: no comma; the others keep theirs
      arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    elif arg.comma is cst.MaybeSentinel.DEFAULT:
      arg = arg.with_changes(comma=cst.Comma(
          whitespace_after=cst.SimpleWhitespace(" ")))
    written.append(arg)
  return call.with_changes(args=written)
