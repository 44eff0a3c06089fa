"""Where each value a pmapped step takes comes from: the global step's reading.

`python -m compare.rewrite --global` (`compare._src.rewrite_global`) places
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
reassigned later in an enclosing loop counts from the loop's start). A value
whose layout cannot be told, or that is read in a way the global layout
changes, is a `Blocker` with its line and reason: the global step is then
not written for the file.
"""

import dataclasses

import libcst as cst
from libcst import metadata

from compare._src import rewrite_pmap

R, B, S = "replicated", "global batch", "stacked"
_TREE_MAPS = ("jax.tree.map", "jax.tree_util.tree_map", "jax.tree_map",
              "tree_map", "tree.map")


@dataclasses.dataclass(frozen=True)
class Blocker:
  """A place the global step cannot take: its line and why."""

  line: int
  text: str


@dataclasses.dataclass
class StepLayout:
  """One pmapped step: its line, name, and each argument's and output's
  layout (`R`, `B` or `S`; None where the program never says)."""

  line: int
  name: str
  args: list = dataclasses.field(default_factory=list)
  outs: list | None = None
  calls: list = dataclasses.field(default_factory=list)


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


@dataclasses.dataclass(frozen=True)
class _Assign:
  """A name bound at `end` (the statement's last line): `kind` is R, B, S,
  "biter" (batches from a rewritten prefetch), ("out", step, j) or
  ("alias", node)."""

  line: int
  end: int
  kind: object


class _Reader(cst.CSTVisitor):
  """Collects the steps, their calls, every binding and every read."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,
                           metadata.ExpressionContextProvider)

  def __init__(self, builds_pmap, is_pmap_decorator):
    super().__init__()
    self._builds_pmap, self._is_decorator = builds_pmap, is_pmap_decorator
    self.steps: dict[str, StepLayout] = {}
    self.calls = []       # (scope, step, line, call node)
    self.assigns = {}     # (scope, name) -> [_Assign]
    self.reads = []       # (scope, name, line, allowed: bool)
    self.loops = {}       # scope -> [(start, end)]
    self.params = {}      # scope -> set of names
    self.splitters = set()
    self.replace = {}     # id(original node) -> ("kind", ...) for the writer
    self.blockers: list[Blocker] = []
    self._scope = ["<module>"]
    self._allowed = set()
    self.containers = {}  # id(root Name) -> (unreplicate/[0] node, inner)

  def _pos(self, node):
    return self.get_metadata(metadata.PositionProvider, node)

  def _line(self, node) -> int:
    return self._pos(node).start.line

  def _root(self, node):
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

  def _allow(self, node, how: str, container=None):
    root = self._root(node)
    if root is not None:
      self._allowed.add((id(root), how))
      if container is not None:
        self.containers[id(root)] = (container, node)

  def visit_FunctionDef(self, node):
    name = splitter_name(node)
    if name:
      self.splitters.add(name)
    for decorator in node.decorators:
      if self._is_decorator(decorator.decorator):
        self.steps[node.name.value] = StepLayout(self._line(decorator),
                                                 node.name.value)
    self._scope.append(node.name.value)
    self.params[node.name.value] = {
        p.name.value for p in (*node.params.params, *node.params.kwonly_params,
                                *node.params.posonly_params)}
    return True

  def leave_FunctionDef(self, node):
    self._scope.pop()

  def _loop(self, node):
    pos = self._pos(node)
    self.loops.setdefault(self._scope[-1], []).append(
        (pos.start.line, pos.end.line))

  def visit_While(self, node):
    self._loop(node)

  def visit_For(self, node):
    self._loop(node)
    line, target = self._line(node), node.target
    source = node.iter
    if (isinstance(source, cst.Call) and rewrite_pmap.dotted(source.func)
        == "enumerate" and isinstance(target, cst.Tuple)
        and len(target.elements) == 2):
      source, target = source.args[0].value, target.elements[1].value
    if isinstance(source, cst.Name):
      self._allow(source, "biter")
    kind = ("alias-iter", source) if isinstance(source, cst.Name) else S
    for name in self._names(target):
      self._bind(name, line, line, kind)

  def _names(self, target):
    if isinstance(target, cst.Name):
      return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
      return [n for e in target.elements for n in self._names(e.value)]
    return []

  def _bind(self, name, line, end, kind):
    self.assigns.setdefault((self._scope[-1], name), []).append(
        _Assign(line, end, kind))

  def visit_Assign(self, node):
    pos, value = self._pos(node), node.value
    line, end = pos.start.line, pos.end.line
    if len(node.targets) != 1:
      return True
    target = node.targets[0].target
    if isinstance(target, cst.Name) and self._builds_pmap(value):
      self.steps[target.value] = StepLayout(self._line(value), target.value)
      return True
    step = (rewrite_pmap.dotted(value.func) if isinstance(value, cst.Call)
            else "")
    if isinstance(target, (cst.Tuple, cst.List)):
      for j, element in enumerate(target.elements):
        if isinstance(element.value, cst.Name):
          self._bind(element.value.value, line, end,
                     ("out", step, j) if step else S)
      return True
    if not isinstance(target, cst.Name):
      return True
    if is_replicate_call(value):
      kind = R
    elif is_shard_call(value, self.splitters):
      kind = B
    elif step:
      kind = ("out", step, None)
    elif self._root(value) is not None:
      kind = ("alias", value)
      self._allow(value, "alias")
    elif (isinstance(value, cst.Call) and rewrite_pmap.dotted(value.func)
          == "next" and len(value.args) == 1):
      kind = ("alias-iter", value.args[0].value)
      self._allow(value.args[0].value, "biter")
    else:
      kind = S
    if step and rewrite_pmap.dotted(value.func).endswith(
        "prefetch_to_device"):
      kind = "biter"
    self._bind(target.value, line, end, kind)
    return True

  def visit_Import(self, node):
    self._imported(node)

  def visit_ImportFrom(self, node):
    self._imported(node)

  def _imported(self, node):
    """An imported name: a host value or a module, never one the rewrite
    placed (S where a step takes it)."""
    if isinstance(node.names, cst.ImportStar):
      return
    line = self._line(node)
    for alias in node.names:
      name = (alias.asname.name if alias.asname else alias.name)
      if isinstance(name, cst.Name):
        self._bind(name.value, line, line, S)

  def visit_Call(self, node):
    name = rewrite_pmap.dotted(node.func)
    line = self._line(node)
    if name in self.steps:
      self.calls.append((self._scope[-1], name, line, node))
      for arg in node.args:
        self._allow(arg.value, "step")
    elif is_unreplicate_call(node):
      self._allow(node.args[0].value, "unreplicate", node)
    elif is_tree_index0(node):
      self._allow(node.args[1].value, "tree0", node)
    elif name.endswith("prefetch_to_device"):
      source = node.args[0].value if node.args else None
      if not (isinstance(source, cst.Call) and rewrite_pmap.dotted(
          source.func) == "map" and len(source.args) == 2
              and rewrite_pmap.dotted(source.args[0].value).endswith(
                  "common_utils.shard")):
        self.blockers.append(Blocker(line, (
            "prefetch_to_device of batches stacked elsewhere: remove the "
            "[devices, ...] reshape where they are made, then place each "
            "global batch with NamedSharding(mesh, P(axis)) "
            "(docs/MIGRATION.md#prefetch)")))
    return True

  def visit_Subscript(self, node):
    if is_index0(node):
      self._allow(node.value, "index0", node)
    return True

  def visit_Name(self, node):
    context = self.get_metadata(metadata.ExpressionContextProvider, node,
                                None)
    if context != metadata.ExpressionContext.LOAD:
      return
    hows = {how for key, how in self._allowed if key == id(node)}
    if node.value in self.steps and not any(
        c[3].func is node for c in self.calls):
      self.blockers.append(Blocker(self._line(node), (
          f"{node.value}, a pmapped step, used as a value: its calls are "
          "not all in view (call it by its name)")))
    self.reads.append((self._scope[-1], node.value, self._line(node),
                       hows, node))


class _Layouts:
  """The reading's answers: each name's layout where it is read, each
  step's outputs, the places that block."""

  def __init__(self, reader: _Reader):
    self.r = reader
    self.blockers = list(reader.blockers)

  def _assigns(self, scope, name):
    found = self.r.assigns.get((scope, name))
    if found is None and scope != "<module>" and name not in self.r.params.get(
        scope, ()):
      return "<module>", self.r.assigns.get(("<module>", name), [])
    return scope, found or []

  def reaching(self, scope, name, line):
    """The bindings of `name` whose value a read at `line` may see."""
    scope, assigns = self._assigns(scope, name)
    prior = [a for a in assigns if a.end < line]
    if not prior:
      return scope, [a for a in assigns if a.line >= line][-1:] if (
          self._in_loop(scope, line)) else []
    last = prior[-1]
    loop = self._in_loop(scope, line)
    if loop and last.line < loop[0]:
      return scope, [last] + [a for a in assigns if line <= a.line <= loop[1]]
    return scope, [last]

  def _in_loop(self, scope, line):
    loops = [l for l in self.r.loops.get(scope, ()) if l[0] <= line <= l[1]]
    return max(loops, default=None)

  def kind(self, scope, name, line, depth=0):
    """R, B, S, "biter", or None (cannot tell: a parameter or unbound)."""
    scope, bindings = self.reaching(scope, name, line)
    if not bindings or depth > 8:
      return None
    kinds = {self._of(scope, a, depth) for a in bindings}
    if len(kinds) == 1:
      return kinds.pop()
    self.blockers.append(Blocker(line, (
        f"{name} holds values of different layouts here (bound at lines "
        f"{sorted({a.line for a in bindings})}): place them alike by hand")))
    return None

  def _of(self, scope, assign, depth):
    kind = assign.kind
    if isinstance(kind, str):
      return kind
    if kind[0] == "out":
      step = self.r.steps.get(kind[1])
      if step is None:
        return S
      outs = step.outs
      if outs is None:
        return S
      if kind[2] is None:
        return outs if isinstance(outs, str) else S
      return outs[kind[2]] if isinstance(outs, list) and kind[2] < len(
          outs) else S
    root = self.r._root(kind[1])  # pylint: disable=protected-access
    if root is None:
      return S
    found = self.kind(scope, root.value, assign.line, depth + 1)
    if kind[0] == "alias-iter":
      return B if found == "biter" else (None if found == B else S)
    return found

  def _reads_of(self, scope, name, binding):
    """The reads of `name` that `binding` reaches."""
    return [read for read in self.r.reads
            if read[1] == name and self._assigns(read[0], name)[0] == scope
            and binding in self.reaching(read[0], name, read[2])[1]]

  def resolve_outputs(self):
    sites = {}  # (step, j) -> {kind: line}
    for (scope, name), assigns in self.r.assigns.items():
      for a in assigns:
        if not (isinstance(a.kind, tuple) and a.kind[0] == "out"
                and a.kind[1] in self.r.steps):
          continue
        reads = self._reads_of(scope, name, a)
        read_once = reads and all(
            hows & {"unreplicate", "index0", "tree0", "step"}
            for *_, hows, _ in reads)
        kind = R if read_once and a.kind[2] is not None else S
        sites.setdefault(a.kind[1:], {})[kind] = a.line
    for step in self.r.steps.values():
      keys = [j for (name, j) in sites if name == step.name]
      if not keys:
        continue
      if None in keys and len(keys) > 1:
        self.blockers.append(Blocker(step.line, (
            f"{step.name}'s output is unpacked at some calls and kept whole "
            "at others: unpack it alike")))
        continue
      outs = [S] * (max(keys) + 1) if None not in keys else S
      for j in keys:
        kinds = sites[(step.name, j)]
        if len(kinds) > 1:
          self.blockers.append(Blocker(max(kinds.values()), (
              f"output {j} of {step.name} is read as one value at line "
              f"{kinds[R]} and per device at line {kinds[S]}")))
        elif j is not None:
          outs[j] = next(iter(kinds))
      step.outs = outs

  def expression_kind(self, scope, node, line):
    if is_replicate_call(node):
      return R
    if is_shard_call(node, self.r.splitters):
      return B
    root = self.r._root(node)  # pylint: disable=protected-access
    if root is None:
      return S
    return self.kind(scope, root.value, line)

  def resolve_arguments(self):
    for scope, name, line, call in self.r.calls:
      step = self.r.steps[name]
      step.calls.append(line)
      if any(arg.star for arg in call.args):
        self.blockers.append(Blocker(line, (
            f"{name} called with */** arguments: their layouts cannot be "
            "read")))
        continue
      positional = [a for a in call.args if a.keyword is None]
      kinds = []
      for i, arg in enumerate(positional):
        kind = self.expression_kind(scope, arg.value, line)
        if kind is None:
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
    global layout keeps; the reads the rewrite drops (`unreplicate`,
    `[0]`) are recorded for the writer."""
    names = {n for (_, n), assigns in self.r.assigns.items()
             if any(a.kind in (R, B, "biter") or isinstance(a.kind, tuple)
                    for a in assigns)}
    for scope, name, line, hows, node in self.r.reads:
      if name not in names or name in self.r.steps:
        continue
      kind = self.kind(scope, name, line)
      allowed = {R: {"step", "unreplicate", "index0", "tree0", "alias"},
                 B: {"step", "alias"}, "biter": {"biter"}}.get(kind)
      if allowed is None:
        continue
      if not hows & allowed:
        why = {R: "placed once on the mesh now (a copy per device before): "
                  "this read would see one value, not [devices, ...]",
               B: "a global batch now ([batch, ...], not [devices, "
                  "batch/devices, ...]): this read would see its new shape",
               "biter": "global batches now: read them in a for loop or "
                        "with next()"}[kind]
        self.blockers.append(Blocker(line, f"{name} is {why} "
                                     "(docs/MIGRATION.md#idiom-map)"))
      elif kind == R and hows & {"unreplicate", "index0", "tree0"}:
        container, inner = self.r.containers[id(node)]
        self.r.replace[id(container)] = inner


def read(wrapper, builds_pmap, is_pmap_decorator):
  """The layouts of a module's pmapped steps (`wrapper`: its
  `metadata.MetadataWrapper`). Returns `(steps, replace, splitters, blockers)`:
  `steps` by name, `splitters` the tutorial-style split functions,
  `replace` maps `id` of each `unreplicate(x)`, `x[0]`
  or `jax.tree.map(lambda y: y[0], x)` of a replicated value to `x`."""
  reader = _Reader(builds_pmap, is_pmap_decorator)
  wrapper.visit(reader)
  layouts = _Layouts(reader)
  layouts.resolve_outputs()
  layouts.resolve_arguments()
  layouts.check_reads()
  blockers = sorted(set(layouts.blockers), key=lambda b: b.line)
  return reader.steps, reader.replace, reader.splitters, blockers
