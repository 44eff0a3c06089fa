"""Which bindings of a name a read sees: the plan's scoping rules.

What comes in: the reading of a module (`global_reader.Reader`: each
scope's bindings, parameters, enclosing scope, loops, conditional blocks,
reads). What goes out: for a read of a name at a line, the scope that binds
it and the bindings whose value it may see: in line order within a
function; a binding in a block that may not run leaves the one before it in
play; a loop's later bindings reach its earlier reads; a nested function
(a closure) sees the enclosing one's bindings that reach its def, or any
later, since it reads them when it is called. `reads_of` is the converse.
"""


def assigns_seen(r, scope, name):
  """The scope whose binding of `name` a read in `scope` sees (its own,
  an enclosing function's, the module's) and that scope's bindings."""
  while scope != "<module>":
    found = r.assigns.get((scope, name))
    if found is not None or name in r.params.get(scope, ()):
      return scope, found or []
    scope = r.parents.get(scope, "<module>")
  return scope, r.assigns.get((scope, name), [])


def reaching(r, scope, name, line):
  """The bindings of `name` whose value a read at `line` may see: in a
  function nested in the one that binds it, any (the closure reads the
  value when it is called, not where it is written)."""
  own, (scope, assigns) = scope, assigns_seen(r, scope, name)
  if scope not in (own, "<module>"):
    # A nested function runs after its def: the bindings reaching that
    # line, or any later (all where the def is not one in view).
    line = r.def_line_in(own, scope)
    return scope, assigns if line is None else reaching(
        r, scope, name, line)[1] + [a for a in assigns if a.line > line]
  # A binding whose statement ends at or after the read (the read in
  # its own right-hand side, on any of its lines) is a later one.
  prior = [a for a in assigns if a.end < line]
  if not prior:
    return scope, [a for a in assigns if a.end >= line][-1:] if (
        in_loop(r, scope, line)) else []
  # A binding in a block that may not have run (an `if`, a `try`) leaves
  # the one before it in play.
  at = len(prior) - 1
  while at > 0 and conditional(r, scope, prior[at], line):
    at -= 1
  chosen = prior[at:]
  loop = in_loop(r, scope, line)
  if loop and chosen[-1].line < loop[0]:
    return scope, chosen + [a for a in assigns
                            if a.end >= line and a.line <= loop[1]]
  return scope, chosen


def conditional(r, scope, assign, line) -> bool:
  """Whether `assign` is in a block that may not run and that does not
  hold the read at `line`."""
  return any(start <= assign.line <= end and not start <= line <= end
             for start, end in r.suites.get(scope, ()))


def in_loop(r, scope, line):
  """The innermost loop `(start, end)` holding `line`, or None."""
  loops = [l for l in r.loops.get(scope, ()) if l[0] <= line <= l[1]]
  return max(loops, default=None)


def reads_of(r, scope, name, binding):
  """The reads of `name` that `binding` reaches."""
  return [read for read in r.reads
          if read[1] == name and assigns_seen(r, read[0], name)[0] == scope
          and binding in reaching(r, read[0], name, read[2])[1]]
