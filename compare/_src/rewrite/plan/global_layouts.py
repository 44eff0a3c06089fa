"""Where each value a pmapped step takes comes from: the global step's reading.

`python -m compare.rewrite --global` (`pipeline`) places
the state once on the mesh and each batch as one global array. For that it
must know, for each argument of each pmapped step, which layout it arrives
in once the file's `replicate`/`shard` calls are rewritten:

- `R`, replicated: made by `replicate(...)` (flax's `jax_utils`, or the pmap
  tutorial's `jax.tree.map(lambda x: jnp.array([x] * n), tree)`), or a step
  output fed back where one is expected. Placed with `P()`; the step sees it
  as it is.
- `B`, a global batch: made by `common_utils.shard(...)`, a function whose
  body is the tutorial's `arr.reshape(n, arr.shape[0] // n, ...)`, or taken
  from `prefetch_to_device(map(common_utils.shard, ...), n)`. Placed with
  `P(axis)`; the step sees its rows, as pmap's step saw its block.
- `S`, pmap's stacked `[devices, ...]` layout, kept (a key per device from
  `random.split(key, jax.local_device_count())`, a step output the program
  reads per device): `P(axis)`, each device's block without its axis of 1.

The reading is by name, within each function, in line order (a value
reassigned later in an enclosing loop counts from the loop's start; a
nested function's read of the enclosing one's value, any of its bindings).
A value
whose layout cannot be told, or that is read in a way the global layout
changes, is a `Blocker` with its line and reason: the global step is then
not written for the file. Which bindings a read sees is `reaching`'s rule;
how a step's outputs are read, hence laid out, `step_outputs`'.
"""


import libcst as cst

from compare._src.rewrite.layouts import B
from compare._src.rewrite.layouts import Blocker
from compare._src.rewrite.layouts import CONFLICT
from compare._src.rewrite.layouts import CYCLE
from compare._src.rewrite.layouts import R
from compare._src.rewrite.layouts import S
from compare._src.rewrite.layouts import StepLayout
from compare._src.rewrite.plan import reaching
from compare._src.rewrite.plan import step_outputs
from compare._src.rewrite.read import global_calls
from compare._src.rewrite.read import global_handed
from compare._src.rewrite.read import global_reader
from compare._src.rewrite.read import names
from compare._src.rewrite.read.global_idioms import is_replicate_call
from compare._src.rewrite.read.global_idioms import is_shard_call
from compare._src.rewrite.read.global_idioms import root_name
from compare._src.rewrite.read.names import code_of

__all__ = ["B", "Blocker", "CONFLICT", "R", "S", "StepLayout", "read"]


class _Layouts(global_calls.Followed, global_handed.Handed):
  """The reading's answers: each name's layout where it is read, each
  step's outputs, the places that block."""

  def __init__(self, reader: global_reader.Reader):
    self.r = reader
    self.blockers = list(reader.blockers)
    self._active = set()  # the bindings whose layout is being read
    # A step's output read per device (`read_as_one`): (step, j) -> line.
    self.read_per_device = {}
    self.reduced_reads = set()  # ids of `x[0]`'s x: a reduced output

  def reaching(self, scope, name, line):
    """The bindings of `name` a read at `line` may see (`reaching`)."""
    return reaching.reaching(self.r, scope, name, line)

  def kind(self, scope, name, line, depth=0, strict=True):
    """R, B, S, "biter", CONFLICT (a `Blocker` added), or None (cannot
    tell: a parameter or unbound). Not `strict` (a read that is no step's
    argument), values of no layout the global step changes may mix: the
    read sees what it saw before (`predict`'s `activations`, the inputs and
    then each layer's output)."""
    own, (scope, bindings) = scope, self.reaching(scope, name, line)
    if not bindings or depth > 8:
      return None
    if scope in (own, "<module>") and not any(a.end < line for a in bindings):
      # Only the loop binds it, later: its first pass reads a value from
      # outside (a parameter, the caller's), out of view whatever the loop
      # makes of it.
      return None
    kinds = {self._of(scope, a, depth, strict) for a in bindings} - {CYCLE}
    if not kinds:
      return CYCLE if depth else None
    if len(kinds) == 1:
      return kinds.pop()
    placed = kinds & {R, B, "biter", CONFLICT}
    if not placed and (not strict or any(
        reaching.conditional(self.r, scope, a, line) for a in bindings)):
      # Values the global step does not place, from either side of an
      # `if` (inside a pmapped body, say): what they were, as before.
      return None if None in kinds or not strict else S
    per_device = sorted({self.read_per_device[a.kind[1:]] for a in bindings
                         if isinstance(a.kind, tuple) and a.kind[0] == "out"
                         and a.kind[1:] in self.read_per_device})
    self.blockers.append(Blocker(line, (
        f"{name} holds values of different layouts here (bound at lines "
        f"{sorted({a.line for a in bindings})}): place them alike by hand"
        + (f"; the step's output is read per device at line(s) {per_device}"
           " (or handed on there), so it keeps pmap's stacked layout"
           if per_device else ""))))
    return CONFLICT

  def _of(self, scope, assign, depth, strict=True):
    # A binding met again while its own layout is being read (a loop
    # through the program's functions: `state = sync(state)`): the others
    # decide, as a loop's first value and body do.
    key = (scope, id(assign))
    if key in self._active:
      return CYCLE
    self._active.add(key)
    try:
      return self._of_binding(scope, assign, depth, strict)
    finally:
      self._active.discard(key)

  def _of_binding(self, scope, assign, depth, strict):
    kind = assign.kind
    if isinstance(kind, str):
      return kind
    if kind[0] == "param":
      return self.parameter_kind(kind[1], kind[2], depth + 1)
    if kind[0] == "expr":
      return self.expression_kind(scope, kind[1], assign.line, depth + 1)
    if kind[0] == "out":
      step = self.r.steps.get(kind[1])
      if step is None:
        return self.returned(kind[1], depth, kind[2])
      outs = step.outs
      if outs is None:
        return S
      if kind[2] is None:
        return outs if isinstance(outs, str) else S
      return outs[kind[2]] if isinstance(outs, list) and kind[2] < len(
          outs) else S
    root = root_name(kind[1])
    if root is None:
      return S
    found = self.kind(scope, root.value, assign.line, depth + 1, strict)
    if kind[0] == "alias-iter":
      return B if found == "biter" else (None if found == B else S)
    return found

  def _reads_of(self, scope, name, binding):
    """The reads of `name` that `binding` reaches (`reaching`)."""
    return reaching.reads_of(self.r, scope, name, binding)

  def expression_kind(self, scope, node, line, depth=0):
    if is_replicate_call(node, self.r.known):
      return R
    if is_shard_call(node, self.r.known):
      return B
    if global_calls.structure_values(node) is not None:
      return self.structure_kind(scope, node, line, depth)
    if global_calls.is_replace(node):
      return self.replace_kind(scope, node, line, depth)
    if isinstance(node, cst.Call) and names.dotted(
        node.func) in self.r.steps:
      return self.inline_output_kind(node)
    root = root_name(node)
    if root is None:
      return S
    return self.kind(scope, root.value, line, depth)

  def resolve_arguments(self):
    for scope, name, line, call in self.r.calls:
      step = self.r.steps[name]
      step.calls.append(line)
      if any(arg.star for arg in call.args):
        self.blockers.append(Blocker(line, (
            f"{name} called with */** arguments: their layouts cannot be "
            "read")))
        continue
      positional = [a for i, a in enumerate(
          a for a in call.args if a.keyword is None) if i not in step.static]
      kinds = []
      for i, arg in enumerate(positional):
        kind = self.expression_kind(scope, arg.value, line)
        if kind == CONFLICT:
          kind = None
        elif kind is None:
          self.blockers.append(Blocker(line, (
              f"argument {i} of {name}, `{code_of(arg.value)}`: where it "
              f"comes from is not in view (a parameter of {scope}, or "
              "unbound here): place it by hand (docs/MIGRATION.md"
              "#idiom-map)")))
        kinds.append(kind)
      for arg in call.args:
        if arg.keyword is not None and self.expression_kind(
            scope, arg.value, line) in (R, B):
          self.blockers.append(Blocker(line, (
              f"keyword argument {arg.keyword.value} of {name} is "
              f"{self.expression_kind(scope, arg.value, line)}: keyword "
              "arguments keep pmap's stacked layout; pass it positionally")))
      if None in kinds:
        continue
      if step.args and step.args != kinds:
        self.blockers.append(Blocker(line, (
            f"{name} is called with arguments of other layouts than at "
            f"line {step.calls[0]}: {kinds} here, {step.args} there")))
        continue
      step.args = kinds

  def check_reads(self):
    """Every read of a replicated value or a global batch is one the
    global layout keeps; the reads the rewrite drops (`unreplicate`, a
    tree map of `[0]`) are recorded for the writer."""
    names = {n for (_, n), assigns in self.r.assigns.items()
             if any(a.kind in (R, B, "biter") or isinstance(a.kind, tuple)
                    for a in assigns)}
    for scope, name, line, hows, node in self.r.reads:
      if name not in names or name in self.r.steps or (
          id(node) in self.reduced_reads):
        continue
      kind = self.kind(scope, name, line, strict=False)
      # By keyword: `resolve_arguments` names the place.
      allowed = {R: {"step", "stepkw", "unreplicate", "tree0", "alias",
                     "toglobal"},
                 B: {"step", "stepkw", "alias", "yield"}, "biter": {"biter", "return"}
                 }.get(kind)
      if allowed is None:
        continue
      allowed = allowed | self._followed_reads(scope, kind, hows, node, line)
      if kind == R and hows == {"index0"}:
        self.blockers.append(Blocker(line, (
            f"{name}[0] of a replicated value: device 0's copy where {name} "
            "is an array, its first element (every device's) where a tuple "
            "or list, and only running it tells; write jax_utils."
            f"unreplicate({name}) for the copy, or unpack the tuple "
            "(docs/MIGRATION.md#trap-unreplicate)")))
      elif not hows & allowed:
        why = {R: "placed once on the mesh now (a copy per device before): "
                  "this read would see one value, not [devices, ...]",
               B: "a global batch now ([batch, ...], not [devices, "
                  "batch/devices, ...]): this read would see its new shape",
               "biter": "global batches now: read them in a for loop or "
                        "with next()"}[kind]
        self.blockers.append(Blocker(line, f"{name} is {why} "
                                     "(docs/MIGRATION.md#idiom-map)"))
      elif kind == R and hows & {"unreplicate", "tree0"}:
        container, inner = self.r.containers[id(node)]
        parts = self.r.unreplicated_parts.get(id(container), [])
        if len(parts) != len(getattr(inner, "elements", parts)) or any(
            self.kind(*part) != R for part in parts):
          self.blockers.append(Blocker(line, (
              "unreplicate of a tuple whose parts are not all replicated "
              "values by name: unreplicate each (docs/MIGRATION.md"
              "#trap-unreplicate)")))
        else:
          self.r.replace[id(container)] = inner


  def _followed_reads(self, scope, kind, hows, node, line) -> set:
    """The reads `global_calls` follows that keep `kind`: given to a
    parameter taking it, `x.replace(...)` of it, returned where each
    call's `x = f(...)` takes it."""
    followed = set()
    if "param" in hows:
      function, _, arg = self.r.param_of[id(node)]
      definition = self.followed_function(function)
      param = definition and global_calls.parameter_of(
          definition.node, self.r.param_of[id(node)][1], arg)
      if param and self.parameter_kind(function, param) == kind:
        followed.add("param")
    if "struct" in hows and self.structure_kind(
        scope, self.r.structures[id(node)], line) == kind:
      followed.add("struct")
    if "replace" in hows and kind == R and self.replace_kind(
        scope, self.r.replaces[id(node)], line) == R:
      followed.add("replace")
    if "return" in hows and kind == R and self.returned(
        scope, 0, self.r.return_at.get(id(node))) == R:
      followed.add("return")
    return followed


def read(wrapper, builds_pmap, is_pmap_decorator, declared=None,
         reduced=None):
  """The layouts of a module's pmapped steps (`wrapper`: its
  `metadata.MetadataWrapper`). Returns `(steps, replace, known, blockers)`:
  `steps` by name, `known` the program's own idioms (`global_idioms.Known`),
  `replace` maps `id` of each `unreplicate(x)` or `jax.tree.map(lambda y:
  y[0], x)` of a replicated value to `x`.
  `declared`: the step the team's Port declares, which may be handed on as
  a value (its callers pass the Port's layout).
  `reduced`: by a pmap's line, the outputs its body reduces over the axis
  (`global_written.reduced_outputs`)."""
  reader = global_reader.Reader(builds_pmap, is_pmap_decorator, declared)
  wrapper.visit(reader)
  reader.reduced = {name: (reduced or {}).get(step.line, set())
                    for name, step in reader.steps.items()}
  layouts = _Layouts(reader)
  layouts.follow_handed_steps()
  step_outputs.resolve(layouts)
  layouts.resolve_arguments()
  layouts.check_reads()
  layouts.check_returns()
  layouts.check_factories()
  # By line, then by words: a set's order changes from run to run.
  blockers = sorted(set(layouts.blockers), key=lambda b: (b.line, b.text))
  return (reader.steps, reader.replace, reader.known, blockers,
          reader.shadowed, layouts.notes())
