"""Each global step's specs, from its arguments' and outputs' layouts.

What comes in: a step's layout (`global_layouts.StepLayout`: where each
argument comes from, how each output is read) and its pmap's `in_axes`,
`out_axes` and axis. What goes out: `StepSpecs`, the global step's
in_specs and out_specs as code, the layouts they lay out (read by the
writer without helpers), a place the global step cannot take (an argument
the program placed that pmap broadcasts), and a finding for the arguments
that keep pmap's stacked layout.
"""

import dataclasses

from compare._src.rewrite.layouts import B, R, S
from compare._src.rewrite.plan import global_layouts
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind


def spec(kind, axis_code) -> str:
  """The `jax.P` of a value of layout `kind` over the axis `axis_code`."""
  return "jax.P()" if kind == R else f"jax.P({axis_code})"


@dataclasses.dataclass(frozen=True)
class StepSpecs:
  """A global step's specs (`in_code`, `out_code`), its pmap's axes as
  written, each argument's layout (`kinds`: None where pmap broadcasts
  it), each output's (`outs`; `one_out` where it returns one value), the
  places it cannot take and the finding on what stays stacked."""

  in_axes: tuple
  out_axes: object
  in_code: str
  out_code: str
  kinds: list
  outs: list
  one_out: bool
  blockers: list
  kept: Finding | None


def _blockers(step, line, given) -> list:
  """A value the program replicated or sharded, given to an argument pmap
  broadcasts: each device saw the whole stacked [devices, ...] array,
  which the global placement no longer is."""
  return [global_layouts.Blocker(line, (
      f"argument {i} of {step.name} is {kind} (made by a "
      f"{'replicate' if kind == R else 'shard'} the second step "
      "rewrites) but the pmap broadcasts it (in_axes=None): each device "
      "saw the whole stacked [devices, ...] array; place it by hand"))
          for i, (axis_in, kind) in enumerate(zip(given, step.args))
          if axis_in is None and kind in (R, B)]


def _tuple_code(kinds, axis) -> str:
  return "(" + ", ".join(
      "jax.P()" if k in (R, None) else f"jax.P({axis})" for k in kinds
  ) + ("," if len(kinds) == 1 else "") + ")"


def step_specs(step, declared, line, in_axes, out_axes, axis) -> StepSpecs:
  """The specs of `step` (its pmap at `line`, over `axis`: its code);
  `declared`: the name of the step the Port declares (its arguments are
  the Port's, none a place)."""
  given = (in_axes if isinstance(in_axes, tuple)
           else (in_axes,) * len(step.args))
  blockers = _blockers(step, line, given) if step.name != declared else []
  kinds = [None if axis_in is None else kind
           for axis_in, kind in zip(given, step.args)]
  stacked = [str(i) for i, k in enumerate(kinds) if k == S]
  kept = stacked and Finding(line, Kind.KEPT, (
      f"{step.name}'s argument(s) {', '.join(stacked)} keep pmap's "
      "stacked layout [devices, ...]: made by no replicate, shard or "
      "prefetch_to_device the second step knows (a key per device stays "
      "so; a state or batch stacked by hand is placed by hand: "
      "docs/MIGRATION.md#idiom-map)")) or None
  in_axes = tuple(None if k in (R, B, None) else 0 for k in kinds)
  in_code = _tuple_code(kinds, axis)
  outs = step.outs if step.outs is not None else S
  if isinstance(outs, list):
    given = (out_axes if isinstance(out_axes, tuple)
             else (out_axes,) * len(outs))
    outs = [None if a is None else k for a, k in zip(given, outs)]
    out_axes = tuple(None if k in (R, None) else 0 for k in outs)
    out_code = _tuple_code(outs, axis)
    one_out = False
  else:
    out_axes = None if outs == R or out_axes is None else 0
    out_code = spec(R if out_axes is None else B, axis)
    outs, one_out = [R if out_axes is None else S], True
  return StepSpecs(in_axes, out_axes, in_code, out_code, kinds, outs,
                   one_out, blockers, kept)
