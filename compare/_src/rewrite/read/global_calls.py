"""The program's own functions, followed by the global step's reading.

A value the second step places (a replicated state, a global batch) often
passes through the program's own functions: flax's imagenet example syncs
its state in `sync_batch_stats(state)` (`state.replace(batch_stats=
cross_replica_mean(state.batch_stats))`), saves it in `save_checkpoint(state,
workdir)` (`jax.tree.map(lambda x: x[0], state)`) and returns it; a team's
`train(state, steps)` returns `(state, metrics)`. The reading follows each:

- a parameter takes the layout every call of its function gives it, where
  the function is defined once, undecorated, called by name and never
  handed on as a value; any other is out of view, as before;
- `x.replace(k=v, ...)` of a replicated `x` is replicated where every `v`
  is (a step's output put there is read as one value);
- what a function returns, by name or as a tuple's element, reaches each
  `x = f(...)` or `a, b = f(...)`, and only those.

Each of those is what the file's own calls give and take: a public
function's callers in another file are out of view, and the report says
what they now give or get (`notes`).
"""

import dataclasses

import libcst as cst

from compare._src.rewrite.layouts import B
from compare._src.rewrite.layouts import Blocker
from compare._src.rewrite.layouts import CONFLICT
from compare._src.rewrite.layouts import CYCLE
from compare._src.rewrite.layouts import R
from compare._src.rewrite.layouts import S
from compare._src.rewrite.read import names
from compare._src.rewrite.read.names import code_of

PLACED = (R, B, "biter")
CALLERS = "callers in other files: "  # the notes' words (Subject.PUBLIC)
_LITERALS = (cst.Integer, cst.Float, cst.SimpleString)


@dataclasses.dataclass(frozen=True)
class Def:
  """A function the program defines: its first and last line, node, and
  whether at module level (where another file may import it)."""

  line: int
  end: int
  node: cst.FunctionDef
  module_level: bool


def is_replace(node) -> bool:
  """`x.replace(k=v, ...)`: a flax struct's or TrainState's copy with
  fields replaced, by keyword only."""
  return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
          and node.func.attr.value == "replace" and bool(node.args)
          and all(a.keyword is not None for a in node.args))


def structure_values(node):
  """The values of `dict(k=v, ...)` or `{k: v, ...}` (`dict(params=params)`
  handed to vision_transformer's `infer_fn_repl`), else None."""
  if (isinstance(node, cst.Call) and names.dotted(node.func) == "dict"
      and node.args and all(a.keyword is not None for a in node.args)):
    return [a.value for a in node.args]
  if isinstance(node, cst.Dict) and node.elements and all(
      isinstance(e, cst.DictElement) for e in node.elements):
    return [e.value for e in node.elements]
  return None


def argument(definition, call, param):
  """The expression `call` gives `param` of `definition`; None where the
  default is taken; False where it cannot be read (`*args`, `**kwargs`)."""
  if any(a.star for a in call.args):
    return False
  params = definition.params
  names = [p.name.value for p in (*params.posonly_params, *params.params)]
  positional = [a for a in call.args if a.keyword is None]
  for name, arg in zip(names, positional):
    if name == param:
      return arg.value
  for arg in call.args:
    if arg.keyword is not None and arg.keyword.value == param:
      return arg.value
  return None


def parameter_of(definition, call, arg) -> str | None:
  """The parameter of `definition` that `call`'s `arg` is given to."""
  if arg.keyword is not None:
    return arg.keyword.value
  params = definition.params
  names = [p.name.value for p in (*params.posonly_params, *params.params)]
  positional = [a for a in call.args if a.keyword is None]
  at = next(i for i, a in enumerate(positional) if a is arg)
  return names[at] if at < len(names) else None


def _default_kind(definition, param):
  """S where `param`'s default is a literal (no layout), else None."""
  for p in (*definition.params.posonly_params, *definition.params.params,
            *definition.params.kwonly_params):
    if p.name.value == param and p.default is not None:
      default = p.default
      if isinstance(default, _LITERALS) or (isinstance(default, cst.Name) and
                                            default.value in ("None", "True",
                                                              "False")):
        return S
  return None


class Followed:
  """The `global_layouts._Layouts` answers about the program's functions
  (mixed in: `self.r` is the reading, `self.kind` and
  `self.expression_kind` its answers, `self.blockers` its places)."""

  def _bound_to(self, kind) -> list:
    """`(scope, name, binding)` of each name bound to `kind`."""
    return [(scope, name, a) for (scope, name), assigns
            in self.r.assigns.items() for a in assigns if a.kind == kind]

  def _calls_of(self, function) -> list:
    """The line of each call of `function` by its name."""
    return [line for line, call in self.r.seen_calls
            if names.dotted(call.func) == function]

  def _as_value(self, name) -> list:
    """The lines where `name` is read other than as the function called."""
    called = {id(call.func) for _, call in self.r.seen_calls}
    return [line for _, read, line, _, node in self.r.reads
            if read == name and id(node) not in called]

  def followed_function(self, name):
    """The def of `name` the reading follows into, or None: defined once,
    undecorated, no step, its name never rebound, called by name only
    (never a value)."""
    defs = self.r.functions.get(name, [])
    if (len(defs) != 1 or defs[0].node.decorators or name in self.r.steps
        or any(bound == name for _, bound in self.r.assigns)
        or self._as_value(name)):
      return None
    return defs[0]

  def parameter_kind(self, function, param, depth=0):
    """The layout every call of `function` gives `param`, or None (also
    where `param` is none of its named parameters: `**kwargs` takes it)."""
    definition = self.followed_function(function)
    calls = [c for c in self.r.function_calls if c[1] == function]
    if (definition is None or not calls or depth > 8
        or param not in self.r.params.get(function, ())):
      return None
    given = {}
    for scope, _, line, call in calls:
      arg = argument(definition.node, call, param)
      if arg is False:
        return None
      given.setdefault(_default_kind(definition.node, param) if arg is None
                       else self.expression_kind(scope, arg, line, depth + 1),
                       line)
    kinds = set(given) - {CYCLE}
    if len(kinds & {*PLACED, S}) > 1 and kinds & set(PLACED):
      self.blockers.append(Blocker(definition.line, (
          f"{function}'s parameter {param} is given values of different "
          "layouts: " + ", ".join(f"{k} at line {given[k]}" for k in sorted(
              kinds & {*PLACED, S})) + "; give it one layout")))
    if not kinds:
      return CYCLE if depth else None
    return kinds.pop() if len(kinds) == 1 and kinds <= {*PLACED, S} else None

  def read_as_one(self, read, seen=frozenset()) -> bool:
    """Whether `read` (of a step's output) takes one value, as
    `unreplicate` does, or hands it on only to reads that do: a
    parameter, a `.replace` or a return followed to where they go. Only
    the file's reads: no layout is assumed (a loop back: the others
    decide)."""
    scope, _, _, hows, node = read
    if hows & {"unreplicate", "tree0", "step", "toglobal"}:
      return True
    if "param" in hows:
      function, call, arg = self.r.param_of[id(node)]
      definition = self.followed_function(function)
      param = definition and parameter_of(definition.node, call, arg)
      bound = [a for a in self.r.assigns.get((function, param), [])
               if a.kind == ("param", function, param)]
      return bool(bound) and self._bound_as_one(function, param, bound[0],
                                                seen)
    if "struct" in hows:
      made = self.r.structures[id(node)]
      named = self._bound_to(("expr", made))
      return (id(made) in self.r.step_args and not named) or (
          bool(named) and all(self._bound_as_one(*each, seen)
                              for each in named))
    if "replace" in hows:
      call = self.r.replaces[id(node)]
      named = self._bound_to(("expr", call))
      if named:
        return all(self._bound_as_one(*each, seen) for each in named)
      if any(value is call for _, value in self.r.returns.get(scope, ())):
        return self._returned_as_one(scope, None, seen)
    elif "return" in hows:
      return self._returned_as_one(scope, self.r.return_at.get(id(node)),
                                   seen)
    return False

  def _bound_as_one(self, scope, name, binding, seen) -> bool:
    key = (scope, name, binding.line)
    if key in seen:
      return True
    return all(self.read_as_one(read, seen | {key})
               for read in self._reads_of(scope, name, binding))

  def _returned_as_one(self, function, at, seen) -> bool:
    """Each call of `function` binds what it returns (element `at`) to
    names read as one value. Called in no other way here, it is returned
    to callers in other files (`notes` names a public one's)."""
    bound = self._bound_to(("out", function, at))
    return len(self._calls_of(function)) == len(bound) and all(
        self._bound_as_one(*each, seen) for each in bound)

  def replace_kind(self, scope, node, line, depth=0):
    """`x.replace(k=v, ...)`: R where `x` and every `v` are, S where none
    is placed, else a `Blocker` (a state of two layouts)."""
    base = self.expression_kind(scope, node.func.value, line, depth + 1)
    values = [self.expression_kind(scope, a.value, line, depth + 1)
              for a in node.args]
    known = [k for k in (base, *values) if k != CYCLE]
    if known and all(k == R for k in known):
      return R
    if {base, *values} & {*PLACED, CONFLICT}:
      self.blockers.append(Blocker(line, (
          f"{code_of(node.func.value)}.replace(...) puts values of other "
          f"layouts together ({base} and {values}): place them alike by "
          "hand (docs/MIGRATION.md#idiom-map)")))
      return CONFLICT
    return None if base is None or not known else S

  def structure_kind(self, scope, node, line, depth=0):
    """A dict of replicated values (or of global batches) is one; of none
    placed, S; any other mix is a `Blocker`."""
    kinds = [self.expression_kind(scope, v, line, depth + 1)
             for v in structure_values(node)]
    known = {k for k in kinds if k != CYCLE}
    if known in ({R}, {B}):
      return known.pop()
    if known & {*PLACED, CONFLICT}:
      self.blockers.append(Blocker(line, (
          f"a dict of values of different layouts ({sorted(map(str, known))})"
          ": place them alike by hand (docs/MIGRATION.md#idiom-map)")))
      return CONFLICT
    return None if None in known or not known else S

  def inline_output_kind(self, node):
    """A step's output used where it is made (`x.replace(k=step(...))`)."""
    step = self.r.steps.get(names.dotted(node.func))
    return step.outs if isinstance(step.outs, str) else S

  def returned(self, function, depth=0, at=None):
    """What a call of `function` holds (`at`: its tuple's element `at`):
    "biter" or R where every return gives that, else S."""
    kinds = set()
    for line, node in self.r.returns.get(function, []):
      if at is not None:
        if not (isinstance(node, cst.Tuple) and at < len(node.elements)
                and not isinstance(node.elements[at], cst.StarredElement)):
          kinds.add(S)
          continue
        node = node.elements[at].value
      kinds.add("tuple" if isinstance(node, cst.Tuple) else
                self.expression_kind(function, node, line, depth + 1))
    kinds.discard(CYCLE)
    return kinds.pop() if kinds in ({"biter"}, {R}) else S

  def _tuple_length(self, function):
    lengths = {len(node.elements) if isinstance(node, cst.Tuple) else None
               for _, node in self.r.returns.get(function, [])}
    return lengths.pop() if len(lengths) == 1 else None

  def check_returns(self):
    """A function returning placed values is called only where the
    reading follows them: `x = f(...)`, or `a, b = f(...)` for a tuple."""
    for function, returns in self.r.returns.items():
      line = returns[0][0]
      whole = self.returned(function)
      length = self._tuple_length(function)
      kinds = [self.returned(function, 0, j) for j in range(length or 0)]
      if whole in PLACED:
        self._returned_to_names(function, line, whole, None)
      elif set(kinds) & set(PLACED):
        self._returned_to_names(function, line, next(
            k for k in kinds if k in PLACED), length)

  def _returned_to_names(self, function, line, kind, length):
    what = "global batches" if kind == "biter" else "a replicated value"
    form = (f"x = {function}(...)" if length is None else
            ", ".join("xyzuvw"[:length]) + f" = {function}(...)")
    for at, call in self.r.seen_calls:
      if names.dotted(call.func) != function:
        continue
      if (id(call) not in self.r.assigned_calls if length is None
          else self.r.unpacked_calls.get(id(call)) != length):
        self.blockers.append(Blocker(at, (
            f"{function} returns {what} (line {line}): call it as "
            f"`{form}` so that it can be followed (docs/REWRITE.md"
            "#functions)")))
    # Handed on as a value (`map(create, seeds)`), its results go where
    # the reading does not follow them.
    for at in self._as_value(function):
      self.blockers.append(Blocker(at, (
          f"{function} returns {what} (line {line}) and is used here as "
          f"a value: call it as `{form}` so that it can be followed "
          "(docs/REWRITE.md#functions)")))

  def check_factories(self):
    """A step made by a function that returns its pmap is read as the
    name its one call binds: a second call, a second def or a use as a
    value would give that one pmap two layouts' worth of callers."""
    for function, (line, bound_at) in self.r.factories.items():
      calls, valued = self._calls_of(function), self._as_value(function)
      if len(calls) > 1 or valued or len(self.r.functions.get(function,
                                                              [])) != 1:
        self.blockers.append(Blocker(bound_at, (
            f"{function} returns a pmap (line {line}) and is defined or "
            f"called other than once as `step = {function}(...)` (lines "
            f"{sorted(set(calls + valued))}): each call's step is that one "
            "pmap to the reading; call it once (docs/REWRITE.md#functions)"
            )))

  def notes(self):
    """What each public module-level function now takes or returns, as
    this file's calls give and read it: `(line, text)`; a caller in
    another file, if any, is out of view."""
    found = []
    for name, defs in self.r.functions.items():
      if name.startswith("_") or len(defs) != 1 or not defs[0].module_level:
        continue
      params = sorted(p for p in self.r.params.get(name, ())
                      if self.parameter_kind(name, p) in PLACED)
      length = self._tuple_length(name)
      gives = [self.returned(name)] + [self.returned(name, 0, j)
                                       for j in range(length or 0)]
      if not params and not set(gives) & set(PLACED):
        continue
      what = " and ".join(
          [f"takes {p} {self.parameter_kind(name, p)}" for p in params]
          + (["returns global arrays"] if set(gives) & set(PLACED) else []))
      found.append((defs[0].line, (
          f"{CALLERS}{name} {what}, as this file's calls give and read "
          "them; a caller in another file, if any, now gives and gets them "
          "placed once (NamedSharding), not pmap's [devices, ...]")))
    return found
