"""A pmapped step handed to the program's own function by its name.

flax's `examples/wmt` builds `p_eval_step` in `train_and_evaluate` and
hands it on: `evaluate(p_eval_step=p_eval_step, params=state.params, ...)`,
whose body calls `p_eval_step(params, eval_batch)`. The reading is by name
(`global_reader`), so where every call of `evaluate` gives its parameter
`p_eval_step` the step of that very name, the parameter's calls are the
step's calls, read in `evaluate`'s scope as any other.

Anything less is a place for a person: the function is not followed
(decorated, defined twice, rebound, itself handed on), a call gives the
parameter something else or gives the step under another name, or the
body hands the parameter on again or reads it other than by calling it.
"""

from compare._src.rewrite.layouts import Blocker
from compare._src.rewrite.read import global_calls
from compare._src.rewrite.read import names
from compare._src.rewrite.read.global_idioms import root_name


def _used_as_value(line, name) -> Blocker:
  return Blocker(line, (
      f"{name}, a pmapped step, used as a value: its calls are not all in "
      "view (call it by its name)"))


class Handed:
  """Mixed into `global_layouts._Layouts` (`self.r` the reading)."""

  def follow_handed_steps(self):
    """The calls of a parameter every call gives a step of its name become
    that step's calls; each other use of a step as a value is a place."""
    handed = set()  # (function, param) each given a step of its name
    for line, name, node in self.r.step_values:
      given = self.r.param_of.get(id(node))
      if given is None or given[2].value is not node:
        self.blockers.append(_used_as_value(line, name))
        continue
      function, call, arg = given
      definition = self.followed_function(function)
      param = definition and global_calls.parameter_of(definition.node, call,
                                                       arg)
      why = self._why_not_followed(function, definition, param, name)
      if why:
        self.blockers.append(Blocker(line, (
            f"{name}, a pmapped step, {why} (docs/REWRITE.md#functions)")))
        continue
      handed.add((function, param))
    for function, param in handed:
      self._calls_become_steps(function, param)
    # A name of a step's bound in the calling function (a local, or a
    # parameter not given the step): its calls are no step's.
    for scope, name, line, _ in list(self.r.calls):
      local = [a for a in self.r.assigns.get((scope, name), ())
               if a.kind != ("param", scope, name)]
      if local:
        self.blockers.append(Blocker(line, (
            f"{name} is bound in {scope} at line {local[0].line} to a value "
            "other than the pmapped step of that name: the reading goes by "
            "name; rename one (docs/REWRITE.md#functions)")))
      elif name in self.r.params.get(scope, ()) and (scope,
                                                      name) not in handed:
        self.blockers.append(Blocker(line, (
            f"{name} is a parameter of {scope}, named as a pmapped step: "
            "the reading goes by name; give the step to it by that name at "
            "every call, or rename the parameter (docs/REWRITE.md"
            "#functions)")))

  def _why_not_followed(self, function, definition, param, name) -> str:
    """Why the step given to `function` (`definition`, where followed) as
    `param` cannot be followed; empty where it can."""
    if not self.r.functions.get(function):
      return (f"given to {function}, not a function of this file: its "
              "calls are not in view")
    if definition is None:
      return (f"given to {function}, which the reading does not follow "
              "(defined twice, decorated, rebound or itself handed on): "
              "its calls are not in view")
    if param is None or param not in self.r.params.get(function, ()):
      return f"given to {function}'s */**: its calls are not in view"
    if param != name:
      return (f"given to {function}'s parameter {param}, another name: the "
              f"reading goes by name; name the parameter {name}")
    for scope, _, line, call in self.r.function_calls:
      if names.dotted(call.func) != function:
        continue
      value = global_calls.argument(definition.node, call, param)
      if not (value is not None and value is not False
              and getattr(value, "value", None) == name
              and name in self.r.steps):
        return (f"given to {function}, whose call at line {line} gives its "
                f"parameter {param} something else: give it {name} at "
                "every call")
      if self.r.assigns.get((scope, name)):
        # A name of the step's bound where that call is: not the step.
        return (f"given to {function}, whose call at line {line} gives it "
                f"the {name} its own function binds: name the step alone "
                f"{name}")
    if any(bound.kind != ("param", function, param)
           for bound in self.r.assigns.get((function, param), ())):
      return f"given to {function}, which binds {param} again"
    start, end = definition.line, definition.end
    for scope, read, line, _, node in self.r.reads:
      if read != param or not start <= line <= end:
        continue
      if scope != function:
        return (f"given to {function}, read at line {line} inside a "
                "function of its own: its calls there are not followed")
      if not self._called(node):
        return (f"given to {function}, which hands it on or reads it at "
                f"line {line}: its calls are not all in view")
    return ""

  def _called(self, node) -> bool:
    return any(call.func is node for _, call in self.r.seen_calls)

  def _calls_become_steps(self, function, param):
    """`param(...)` in `function`, read so far as a call of an unknown
    function, is a call of the step `param` names."""
    reads = {id(read[4]): read[3] for read in self.r.reads}
    for entry in [c for c in self.r.function_calls
                  if c[0] == function and c[1] == param]:
      self.r.function_calls.remove(entry)
      scope, name, line, call = entry
      self.r.calls.append((scope, name, line, call))
      if id(call) in self.r.inline_roots:
        self.r.inline.append((name, line, scope,
                              self.r.inline_roots[id(call)]))
      for arg in call.args:
        self.r.given_to_step(arg)
        root = root_name(arg.value)
        if root is not None and id(root) in reads:
          reads[id(root)].discard("param")
          reads[id(root)].add("step" if arg.keyword is None else "stepkw")
          self.r.param_of.pop(id(root), None)

  def reduced_reads_of(self, output, reads) -> bool:
    """Whether `output` (step, j) is a value the step reduces over the
    axis, read as one (`read_as_one`) or as `x[0]` alone: then it comes
    out `P()` and each `x[0]` is recorded to become `x` (the same value:
    every device holds it)."""
    name, j = output
    if j not in self.r.reduced.get(name, ()):
      return False
    indexed = [r for r in reads if not self.read_as_one(r)]
    if not all(r[3] == {"index0"} and id(r[4]) in self.r.containers
               and self.r.containers[id(r[4])][1] is r[4] for r in indexed):
      return False
    for read in indexed:
      self.r.replace[id(self.r.containers[id(read[4])][0])] = read[4]
      self.reduced_reads.add(id(read[4]))
    return True
