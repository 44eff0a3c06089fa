"""A step's layout as the team's `compare.Port` declares it (`--prove`).

A steps module hands its pmap to a loop in another file: no call in view
says what the step is given. `Declared` is what the Port says instead (the
state `R`, the batch `B`, the metrics per device), `as_declared` gives a
step that layout and the findings that say so (`rewrite_global`).
"""

import dataclasses

from compare._src.rewrite.plan import global_layouts
from compare._src.rewrite.plan.global_layouts import B, R
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject


@dataclasses.dataclass(frozen=True)
class Declared:
  """A step's layout as the team's `compare.Port` declares it (`--prove`):
  each mapped argument's and output's (`R`, `B` or `S`)."""

  name: str
  args: list
  outs: list
  line: int | None = None  # a pmap made in a function: its line

  def mapped(self, step) -> list:
    """The layouts of `step`'s arguments that have one (not its
    `static_broadcasted_argnums`)."""
    return [k for i, k in enumerate(self.args) if i not in step.static]

  @classmethod
  def of(cls, name, signature=None, line=None) -> "Declared":
    """The Port's `(state, batch) -> (state, metrics)`, or the arguments a
    `compare.adapt_step` spreads them over (`signature`): the state (and
    the step index) replicated, the batch split by rows, the metrics per
    device (`[devices]`, as pmap gave them). Values the Port passes after
    the batch (`static_args`: a key per device) keep pmap's stacked layout
    where the pmap maps them (a static one has none)."""
    if signature is None:
      return cls(name, [R, B], [R, global_layouts.S], line)
    return cls(name, [R] * (signature.step_index + signature.state_parts)
               + [B] * len(signature.batch_keys or (None,))
               + [global_layouts.S] * len(signature.static_args),
               [R] * signature.state_parts + [global_layouts.S], line)


DECLARED = "the Port's layout: "


def as_declared(step, declared) -> list:
  """`step` given the layout `declared`. Its callers are out of this file:
  the report says what they now pass, as a place for a person (no reading
  of this file can tell that they do)."""
  step.args, step.outs = declared.mapped(step), list(declared.outs)
  kept = global_layouts.S in step.args
  return [Finding(step.line, Kind.CHANGED, (
      f"{DECLARED}{step.name} takes the state placed once with "
      "NamedSharding(mesh, P()) and the global batch with P(axis)"
      + (", what the Port passes after the batch in pmap's stacked layout"
         if kept else "") + ", and returns the state so and its metrics "
      "per device, as the Port's port_step (declared by --prove)"),
                  Subject.DECLARED),
          Finding(step.line, Kind.PERSON, (
              f"{step.name}'s callers are outside this file: each must now "
              "pass the state placed once with NamedSharding(mesh, P()) "
              "(not replicate) and the global batch with P(axis) (not "
              "shard), as the Port does; no reading of this file sees them "
              "(docs/MIGRATION.md#idiom-map)"))]
