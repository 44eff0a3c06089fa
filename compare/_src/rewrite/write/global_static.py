"""A step with static arguments, written without a helper.

pmap's `static_broadcasted_argnums` are Python values (a train flag, a
dropout rate, flax lm1b's `eos_id` and `max_decode_len`); shard_map takes
no static argument, jit does. Written as a JAX engineer writes it: jit
takes the step's own signature, its static positions as `static_argnums`,
and the shard_map'd function is built inside, closing over the static
values (one trace per value, as pmap's):

    p_train_step = jax.jit(
        lambda state, batch, rng, train, rate: jax.shard_map(
            lambda state, batch, rng: train_step(state, batch, rng, train,
                                                 rate),
            mesh=mesh, in_specs=..., out_specs=...)(state, batch, rng),
        static_argnums=(3, 4), donate_argnums=(0,))

A pmap decorator becomes jit over the function, the shard_map'd body a
function of the mapped arguments nested in it. jit takes every argument
at pmap's position, so `static_argnums` and `donate_argnums` keep pmap's
numbers: both count the static positions, as pmap's did (jax rebases
the donated ones past the static ones itself).
"""

import libcst as cst

from compare._src.rewrite.read import names
from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.write import global_written


def count(step) -> int | None:
  """How many positional arguments the step's calls pass: its mapped ones
  (`step.args`, read from the calls) and its static ones; None where no
  call says, or a static position lies past them."""
  if not step.args:
    return None
  total = len(step.args) + len(step.static)
  return total if max(step.static) < total else None


def positions(step, mapped) -> list[int]:
  """The positions among all the step's arguments of its mapped ones at
  `mapped` (positions among the mapped ones: `step.args`'s)."""
  if not step.static:
    return list(mapped)
  dynamic = [i for i in range(count(step)) if i not in step.static]
  return [dynamic[i] for i in mapped]


def parameter_names(fn, total: int, avoid: set) -> list[str]:
  """The names of the step's `total` positional arguments: the function's
  own (`fn`, its def, or None), else `arg0`, ...; none of `avoid` (the
  names the mapped expression reads, which a lambda's would hide)."""
  own = []
  if fn is not None:
    own = [p.name.value for p in (*fn.params.posonly_params,
                                   *fn.params.params)][:total]
  if len(own) == total and not set(own) & avoid:
    return own
  prefix = "arg"
  while any(n.startswith(prefix) for n in avoid):
    prefix = "_" + prefix
  return [f"{prefix}{i}" for i in range(total)]


def read_names(code: str) -> set:
  """Every name `code` (an expression's source) reads."""
  found = set()

  class Names(cst.CSTVisitor):

    def visit_Name(self, node):
      found.add(node.value)

  cst.parse_expression(code).visit(Names())
  return found


def _call(fun, params) -> tuple[str, list[str]]:
  """`(callee, arguments)` of `fun(params...)`: `functools.partial(f,
  k=v)` called as `f(params..., k=v)`, a lambda in parentheses."""
  if isinstance(fun, cst.Call) and names.dotted(fun.func) in (
      "functools.partial", "partial") and fun.args and all(
          a.keyword is not None for a in fun.args[1:]):
    return code_of(fun.args[0].value), [*params, *(
        f"{a.keyword.value}={code_of(a.value)}" for a in fun.args[1:])]
  code = code_of(fun)
  return (f"({code})" if isinstance(fun, cst.Lambda) else code), list(params)


def _packed(head: str, parts, indent: str, width: int, tail="") -> list:
  """`head` then `parts` joined by commas, packed into lines of `width`,
  each further line at `indent`; `tail` after the last part."""
  lines, line = [], head
  for i, part in enumerate(parts):
    piece = part + ("," if i < len(parts) - 1 else tail)
    if line.strip() and line != head and len(line) + 1 + len(piece) > width:
      lines.append(line.rstrip())
      line = indent
    line += ("" if line in (head, indent) else " ") + piece
  return lines + [line]


def step_expression(fun, params, static, parts, donate, width=79) -> str:
  """`jax.jit(lambda ...: jax.shard_map(...)(...), static_argnums=...)`
  for an assigned pmap of `fun` (its node) with static positions
  `static`; `parts` shard_map's keywords, `donate` pmap's argnums code."""
  mapped = [p for i, p in enumerate(params) if i not in static]
  head, args = _call(fun, params)
  lead = f"        lambda {', '.join(mapped)}: {head}("
  inner = [lead + ", ".join(args) + "),"]
  if len(inner[0]) > width:  # the arguments on lines of their own
    inner = [lead, *_packed(" " * 12, args, " " * 12, width, "),")]
  jit = [f"static_argnums={static!r}"] + (
      [] if donate is None else [f"donate_argnums={donate}"])
  return "\n".join(
      ["jax.jit(", f"    lambda {', '.join(params)}: jax.shard_map(",
       *inner,
       *_packed("        ", parts, "        ", width,
                f")({', '.join(mapped)}),"),
       *_packed("    ", jit, "    ", width, ")")])


def step_function(fn: cst.FunctionDef, static, parts, donate,
                  width=79) -> cst.FunctionDef | None:
  """A pmap decorator's function with static positions `static` as jit
  over it: the body a function of the mapped parameters (the same name,
  shard_map's decorator on it) nested inside and called; its docstring
  stays the outer function's. None where its parameters cannot say
  (`*args`, keyword-only, fewer than the static positions)."""
  params = [*fn.params.posonly_params, *fn.params.params]
  if (fn.params.star_arg not in (None, cst.MaybeSentinel.DEFAULT)
      or fn.params.kwonly_params or fn.params.star_kwarg is not None
      or max(static) >= len(params)):
    return None
  mapped = [p for i, p in enumerate(params) if i not in static]
  statements = list(fn.body.body)
  doc = statements[:1] if statements and isinstance(
      statements[0], cst.SimpleStatementLine) and isinstance(
          statements[0].body[0], cst.Expr) and isinstance(
              statements[0].body[0].value,
              (cst.SimpleString, cst.ConcatenatedString)) else []
  decorator = cst.Decorator(cst.parse_expression(global_written.wrapped(
      "functools.partial", ["jax.shard_map", *parts], "    ", width - 3)))
  inner = fn.with_changes(
      decorators=[decorator],
      params=cst.Parameters(params=[p.with_changes(
          comma=cst.MaybeSentinel.DEFAULT) for p in mapped]),
      body=fn.body.with_changes(body=statements[len(doc):]),
      leading_lines=[])
  called = ", ".join(p.name.value for p in mapped)
  jit = ["jax.jit", f"static_argnums={static!r}"] + (
      [] if donate is None else [f"donate_argnums={donate}"])
  return fn.with_changes(
      decorators=[cst.Decorator(cst.parse_expression(
          global_written.wrapped("functools.partial", jit, "    ",
                                 width)))],
      body=fn.body.with_changes(body=[
          *doc, inner, cst.parse_statement(
              f"return {fn.name.value}({called})\n")]))
