"""How each step's outputs are read, hence laid out: `resolve`.

What comes in: the plan's answers so far (`global_layouts._Layouts`: the
reading, which reads keep one value, the outputs its body reduces). What
goes out: each step's `outs` (`R` where every read of an output takes one
value, `S`, pmap's stacked layout, where any read is per device), the
output reads per device by step (`read_per_device`), and a `Blocker` where
an output is unpacked at some calls and kept whole at others, or read both
ways.
"""

from compare._src.rewrite.layouts import Blocker
from compare._src.rewrite.layouts import R
from compare._src.rewrite.layouts import S
from compare._src.rewrite.plan import reaching


def resolve(layouts):
  """Each step's outputs' layouts (`StepLayout.outs`) from how the
  program reads them (`layouts`: the plan's `global_layouts._Layouts`)."""
  sites = {}  # (step, j) -> {kind: line}
  for (scope, name), assigns in layouts.r.assigns.items():
    for a in assigns:
      if not (isinstance(a.kind, tuple) and a.kind[0] == "out"
              and a.kind[1] in layouts.r.steps):
        continue
      reads = reaching.reads_of(layouts.r, scope, name, a)
      # Not `x[0]`: of a tuple it is the first element, stacked, not one
      # device's copy, and which it is shows only when it runs; kept
      # stacked, the output reads as it did whichever it is.
      # Given to a function, `.replace`d or returned, it is followed
      # (`global_calls.read_as_one`) to each read of where it goes.
      failing = next((r for r in reads if not layouts.read_as_one(r)), None)
      if failing is not None and layouts.reduced_reads_of(a.kind[1:], reads):
        failing = None
      if failing is not None:
        layouts.read_per_device[a.kind[1:]] = failing[2]
      # By the line that reads it; an output read nowhere here (`_`)
      # asks for no layout, and takes pmap's where no call reads it.
      found = sites.setdefault(a.kind[1:], {})
      if reads:
        found.setdefault(S if failing else R, (failing or reads[0])[2])
  for name, line, scope, root in layouts.r.inline:
    # Put into `state.replace(...)`: it goes where that goes.
    sites.setdefault((name, None), {}).setdefault(R if layouts.read_as_one(
        (scope, root.value, line, {"replace"}, root)) else S, line)
  for step in layouts.r.steps.values():
    keys = [j for (name, j) in sites if name == step.name]
    if not keys:
      continue
    if None in keys and len(keys) > 1:
      layouts.blockers.append(Blocker(step.line, (
          f"{step.name}'s output is unpacked at some calls and kept whole "
          "at others: unpack it alike")))
      continue
    outs = [S] * (max(keys) + 1) if None not in keys else S
    for j in keys:
      kinds = sites[(step.name, j)] or {S: None}
      if len(kinds) > 1:
        layouts.blockers.append(Blocker(max(kinds.values()), (
            f"output {j} of {step.name} is read as one value at line "
            f"{kinds[R]} and per device at line {kinds[S]}")))
      elif j is not None:
        outs[j] = next(iter(kinds))
      else:  # one output, kept whole
        outs = next(iter(kinds))
    step.outs = outs
