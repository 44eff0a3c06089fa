"""The reading behind the global step: every step, call, binding and read
of a module (`plan.global_layouts` answers from it)."""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.layouts import B
from compare._src.rewrite.layouts import Blocker
from compare._src.rewrite.layouts import R
from compare._src.rewrite.layouts import S
from compare._src.rewrite.layouts import StepLayout
from compare._src.rewrite.read import global_calls
from compare._src.rewrite.read import global_idioms
from compare._src.rewrite.read import global_scopes
from compare._src.rewrite.read import names
from compare._src.rewrite.read import pipeline_batches
from compare._src.rewrite.read import pipeline_reads
from compare._src.rewrite.read import stacked_calls
from compare._src.rewrite.read.global_idioms import is_index0
from compare._src.rewrite.read.global_idioms import is_prefetch
from compare._src.rewrite.read.global_idioms import is_replicate_call
from compare._src.rewrite.read.global_idioms import is_shard_call
from compare._src.rewrite.read.global_idioms import is_tree_index0
from compare._src.rewrite.read.global_idioms import is_unreplicate_call
from compare._src.rewrite.read.global_idioms import root_name
from compare._src.rewrite.read.global_idioms import splitter_name
from compare._src.rewrite.read.global_idioms import static_argnums


class Reader(pipeline_reads.PipelineReads, global_scopes.Scopes):
  """Collects the steps, their calls, every binding and every read."""

  def __init__(self, builds_pmap, is_pmap_decorator, declared=None):
    super().__init__()
    self._builds_pmap, self._is_decorator = builds_pmap, is_pmap_decorator
    # The step the team's Port declares (`--prove`): handed on as a value
    # (to the Port, to a loop elsewhere), its callers pass that layout.
    self._declared = declared
    self.steps: dict[str, StepLayout] = {}
    self.calls = []       # (scope, step, line, call node)
    self.reads = []       # (scope, name, line, allowed: bool)
    self.known = global_idioms.Known()
    self.replace = {}     # id(original node) -> ("kind", ...) for the writer
    self.blockers: list[Blocker] = []
    self._allowed = set()
    self._mapped = set()  # ids of the functions pmap-building calls map
    self.containers = {}  # id(root Name) -> (unreplicate/[0] node, inner)
    self.unreplicated_parts = {}  # id(unreplicate of a tuple) -> its names
    self.factories = {}  # function returning a pmap -> (its line, call's)
    self.structures = {}  # id(root Name) -> the dict it is a value of
    self.step_args = set()  # ids of the expressions given to a step
    self._keywords = set()  # ids of the keyword Names of arguments
    # Placement calls whose value the reading follows (a name bound to it,
    # a step's argument, a for statement's batches), and every call seen.
    self._followed, self.seen_calls = set(), []
    self.shadowed = set()  # lines of steps a later one of their name hides
    self.returns = {}     # function -> [(line, returned node)]
    self.assigned_calls = set()  # ids of the calls `name = f(...)` binds
    self.unpacked_calls = {}  # id of a call `a, b = f(...)` unpacks -> 2
    self.return_at = {}   # id(root Name) returned -> its place in a tuple
    # The program's own functions, followed into (`global_calls`): each
    # def by name, each call of one by name, each argument's parameter.
    self.functions = {}   # name -> [global_calls.Def]
    self.function_calls = []  # (scope, name, line, call node)
    self.param_of = {}    # id(root Name) given -> (function, call node, arg)
    self.replaces = {}    # id(root Name) -> its `x.replace(k=v)` call
    # (step, line, scope, x's root Name): an output put into `x.replace`.
    self.inline = []
    self.inline_roots = {}  # id of each `v` of `x.replace(k=v)` -> x's root
    # (line, step, Name) of each step read other than called by name.
    self.step_values = []

  def def_line_in(self, own, scope) -> int | None:
    """The line of the def in `scope` that holds `own` (a function nested
    in it, at any depth), or None where that name is defined twice."""
    while self.parents.get(own, scope) != scope:
      own = self.parents[own]
    defs = self.functions.get(own, [])
    return defs[0].line if len(defs) == 1 else None

  def _allow(self, node, how: str, container=None):
    root = root_name(node)
    if root is not None:
      self._allowed.add((id(root), how))
      if container is not None:
        self.containers[id(root)] = (container, node)

  def given_to_step(self, arg):
    """`arg` is an argument of a step's call. By keyword it keeps pmap's
    stacked layout (`global_layouts.resolve_arguments`): no read as one."""
    value = arg.value
    self._allow(value, "step" if arg.keyword is None else "stepkw")
    self._followed.add(id(value))
    self.step_args.add(id(value))

  def _made_in(self, value):
    """The pmap `value`, a call `make_step(...)`, returns: the factory's
    one return a pmap (vision_transformer's `make_update_fn`), else None."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)):
      return None
    returns = self.returns.get(value.func.value, [])
    if len(returns) == 1 and self._builds_pmap(returns[0][1]):
      return returns[0][1]
    return None

  def _add_step(self, step: StepLayout) -> None:
    """A pmapped step by its name; two of one name (in two functions) are
    one name to a reading by name: both refused."""
    other = self.steps.get(step.name)
    if other is not None and other.line != step.line:
      self.blockers.append(Blocker(step.line, (
          f"two pmaps bound to the name {step.name} (lines {other.line} and "
          f"{step.line}): the reading is by name; give each its own")))
      self.shadowed.add(other.line)
    self.steps[step.name] = step

  def visit_FunctionDef(self, node):
    self.functions.setdefault(node.name.value, []).append(global_calls.Def(
        self._line(node), self._pos(node).end.line, node,
        len(self._scope) == 1 and not any(self._own)))
    name = splitter_name(node)
    if name:
      self.known.splitters.add(name)
    for decorator in node.decorators:
      if self._is_decorator(decorator.decorator):
        expr = decorator.decorator
        self._add_step(StepLayout(
            self._line(decorator), node.name.value,
            static=static_argnums(expr.args if isinstance(expr, cst.Call) else ())))
    self.parents[node.name.value] = self._scope[-1]
    self._scope.append(node.name.value)
    self.params[node.name.value] = {
        p.name.value for p in (*node.params.params, *node.params.kwonly_params,
                                *node.params.posonly_params)}
    line = self._line(node)
    for param in self.params[node.name.value]:
      # Its value is the callers' (`global_calls.parameter_kind`).
      self._bind(param, line, line, ("param", node.name.value, param))
    return True

  def leave_FunctionDef(self, node):
    self._scope.pop()

  def visit_For(self, node):
    self._loop(node)
    line, target = self._line(node), node.target
    source = node.iter
    if (isinstance(source, cst.Call) and names.dotted(source.func)
        == "enumerate" and isinstance(target, cst.Tuple)
        and len(target.elements) == 2):
      source, target = source.args[0].value, target.elements[1].value
    if (isinstance(source, cst.Call) and names.dotted(source.func)
        == "zip" and isinstance(target, cst.Tuple) and len(
            target.elements) == len(source.args) and not any(
                a.star or a.keyword for a in source.args)):
      # `for step, batch in zip(range(n), it)` (flax imagenet): each name
      # from its own iterable.
      pairs = [(e.value, a.value) for e, a in zip(target.elements,
                                                  source.args)]
    else:
      pairs = [(target, source)]
    for target, source in pairs:
      if isinstance(source, cst.Name):
        self._allow(source, "biter")
      self._followed.add(id(source))
      kind = (("alias-iter", source) if isinstance(source, cst.Name) else
              B if is_prefetch(source) or self._batches_made(source) else S)
      for name in self._names(target):
        self._bind(name, line, line, kind)

  def visit_Return(self, node):
    """A function's returned value: global batches it returns are read by
    its callers (`global_layouts` follows them to each `x = f(...)`)."""
    if self._scope[-1] != "<module>" and node.value is not None:
      self.returns.setdefault(self._scope[-1], []).append(
          (self._line(node), node.value))
      self._allow(node.value, "return")
      if isinstance(node.value, cst.Tuple):  # `return state, metrics`
        for j, element in enumerate(node.value.elements):
          root = root_name(element.value)
          if root is not None:
            self._allow(element.value, "return")
            self.return_at[id(root)] = j

  def visit_Assign(self, node):
    pos, value = self._pos(node), node.value
    line, end = pos.start.line, pos.end.line
    if len(node.targets) != 1:
      return True
    target = node.targets[0].target
    made = self._made_in(value)
    if isinstance(target, cst.Name) and (self._builds_pmap(value) or made):
      pmap = made or value
      self._add_step(StepLayout(
          self._line(pmap), target.value,
          static=static_argnums([*pmap.args, *(pmap.func.args if isinstance(
              pmap.func, cst.Call) else ())])))
      if made:
        self.factories[value.func.value] = (self._line(pmap), line)
      return True
    step = (names.dotted(value.func) if isinstance(value, cst.Call)
            else "")
    if isinstance(target, (cst.Tuple, cst.List)):
      placed = (R if is_replicate_call(value, self.known) else
                B if is_shard_call(value, self.known) else None)
      if placed is not None:
        # `optimizer, ema = replicate((optimizer, ema))` (flax's pixelcnn):
        # each part of a placed tree is placed alike.
        self._followed.add(id(value))
        for name in self._names(target):
          self._bind(name, line, end, placed)
        return True
      if isinstance(value, cst.Call):
        self.unpacked_calls[id(value)] = len(target.elements)
      for j, element in enumerate(target.elements):
        if isinstance(element.value, cst.Name):
          self._bind(element.value.value, line, end,
                     ("out", step, j) if step else S)
      return True
    if not isinstance(target, cst.Name):
      return True
    if global_idioms.is_replicator(value):
      self.known.replicators.add(target.value)
      return True
    self.known.replicators.discard(target.value)  # rebound: no longer one
    self._followed.add(id(value))
    if isinstance(value, cst.Call):
      self.assigned_calls.add(id(value))
    if is_replicate_call(value, self.known):
      kind = R
    elif is_shard_call(value, self.known):
      kind = B
    elif (self._scope[-1] in self.known.generators and
          pipeline_batches.rows_of(value, self.known.counts) is not None):
      # Stacked by hand in a batch generator: placed where it is made (a
      # stack made elsewhere is pmap's layout, the step's outputs' too).
      kind = B
      self.known.made.add(id(value))
    elif self._batch_generator_call(value):
      kind = "biter"  # a generator of global batches once written
      self.bound_to_batches(target.value)
    elif step == "next" and len(value.args) == 1:
      kind = ("alias-iter", value.args[0].value)
      self._allow(value.args[0].value, "biter")
    elif global_calls.is_replace(value) or global_calls.structure_values(
        value) is not None:
      kind = ("expr", value)  # `state.replace(k=v)`: judged whole
    elif step:
      kind = ("out", step, None)
    elif root_name(value) is not None:
      kind = ("alias", value)
      self._allow(value, "alias")
    else:
      kind = S
    if is_prefetch(value):
      kind = "biter"  # the rewrite places each batch it yields
    self._bind(target.value, line, end, kind)
    return True

  def visit_Call(self, node):
    name = names.dotted(node.func)
    line = self._line(node)
    if self._builds_pmap(node) and node.args:
      # `f = jax.pmap(f, ...)`: the function mapped, not a step used.
      self._mapped.add(id(node.args[0].value))
    self.seen_calls.append((line, node))
    self.note_pipeline_call(node, line)
    if name in self.steps:
      self.calls.append((self._scope[-1], name, line, node))
      if id(node) in self.inline_roots:
        self.inline.append((name, line, self._scope[-1],
                            self.inline_roots[id(node)]))
      for arg in node.args:
        self.given_to_step(arg)
    elif global_calls.is_replace(node):
      root = root_name(node.func.value)
      if root is not None:
        self._allow(node.func.value, "replace")
        self.replaces[id(root)] = node
        for arg in node.args:
          self.inline_roots[id(arg.value)] = root
    elif global_calls.structure_values(node) is not None:
      self._structure(node)
    elif is_unreplicate_call(node):
      value = node.args[0].value
      parts = (value.elements if isinstance(value, (cst.Tuple, cst.List))
               else ())
      # `unreplicate((optimizer, ema))` (flax's pixelcnn): each part read
      # as one value; dropped only where every part is replicated.
      for part in parts:
        self._allow(part.value, "unreplicate", node)
        root = root_name(part.value)
        if root is not None:
          self.containers[id(root)] = (node, value)
          self.unreplicated_parts.setdefault(id(node), []).append(
              (self._scope[-1], root.value, line))
      if not parts:
        self._allow(value, "unreplicate", node)
    elif is_tree_index0(node):
      self._allow(node.args[1].value, "tree0", node)
    elif global_idioms.is_tree_to_global(node):
      self._allow(node.args[1].value, "toglobal")
    elif name.endswith(".replicate") and not is_replicate_call(node, self.known):
      self.blockers.append(Blocker(line, (
          f"{name}(...): " + stacked_calls.OWN_REPLICATE)))
    elif is_prefetch(node) and (self._batch_generator_call(
        node.args[0].value) or self.prefetched_name(node)):
      pass  # its batches are global where made: prefetch is dropped
    elif name.endswith("prefetch_to_device") and not is_prefetch(node):
      self.blockers.append(Blocker(line, (
          "prefetch_to_device's batches given by keyword or */**: place "
          "each global batch with NamedSharding(mesh, P(axis)) by hand "
          "(docs/MIGRATION.md#prefetch)")))
    elif isinstance(node.func, cst.Name):
      # A call of the program's own function: what it is given is judged
      # where its parameter is read (`global_calls`).
      self.function_calls.append((self._scope[-1], name, line, node))
      for arg in node.args:
        root = root_name(arg.value)
        if root is not None and not arg.star:
          self._allow(arg.value, "param")
          self.param_of[id(root)] = (name, node, arg)
    return True

  def leave_Module(self, original_node):
    """A placement the global step writes whose value goes where this
    reading does not follow (inside a comprehension, a container, another
    call, a return) would reach a step laid out for pmap's stack."""
    self.pipeline_checked()
    for line, node in self.seen_calls:
      if id(node) in self._followed or not (
          is_replicate_call(node, self.known) or is_shard_call(node, self.known)
          or is_prefetch(node)):
        continue
      self.blockers.append(Blocker(line, (
          f"the value of {names.dotted(node.func)}(...) goes where "
          "its layout cannot be followed (inside an expression, a "
          "comprehension or a return): bind it to a name first, or place "
          "it by hand (docs/MIGRATION.md#idiom-map)")))

  def _structure(self, node):
    for value in global_calls.structure_values(node) or ():
      root = root_name(value)
      if root is not None:
        self._allow(value, "struct")
        self.structures[id(root)] = node

  def visit_Dict(self, node):
    self._structure(node)

  def visit_Subscript(self, node):
    if is_index0(node):
      self._allow(node.value, "index0", node)
    return True

  def visit_Arg(self, node):
    if node.keyword is not None:  # `f(state=...)`: a name, not a read
      self._keywords.add(id(node.keyword))

  def visit_Name(self, node):
    context = self.get_metadata(metadata.ExpressionContextProvider, node,
                                None)
    if context != metadata.ExpressionContext.LOAD or any(
        node.value in own for own in self._own) or id(node) in self._keywords:
      return
    hows = {how for key, how in self._allowed if key == id(node)}
    if (node.value in self.steps and node.value != self._declared
        and id(node) not in self._mapped
        and not any(c[3].func is node for c in self.calls)):
      # A place unless given to a function followed (`global_handed`).
      self.step_values.append((self._line(node), node.value, node))
    self.reads.append((self._scope[-1], node.value, self._line(node),
                       hows, node))
