"""The global step's writing of the batches the program's pipeline makes.

`placements.Placements` calls `pipeline_call`: where the reading
(`read.pipeline_reads`) found a batch made by the team's own pipeline
(`known.made`), the batch is placed there as the global batch: a reshape to
`[jax.local_device_count(), b, ...]` becomes
`jax.make_array_from_process_local_data(sharding, rows)` of its rows, a
stacking generator's call by the device count and `map(shard, it)` become
generators of global batches, and a `prefetch_to_device` of global batches
goes (flax's would stack their rows again onto this process's devices,
docs/REWRITE.md). A yielded tuple of placed batches is written one a line
(`yielded`), and `it = prefetch_to_device(it, n)` of global batches goes
(`dropped`).
"""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.layouts import B
from compare._src.rewrite.read import names
from compare._src.rewrite.read import pipeline_batches
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.write import global_written


def pipeline_call(placements, original, updated, name, line):
  """The call written where it makes the pipeline's batches (a stacking
  generator's call by the device count, `map(shard, it)`, a reshape to
  `[devices, b, ...]`) or drops a prefetch of global batches; None
  where it is none of these (`known.made`: the reading's).
  `placements`: the step's `placements.Placements` (its `known`,
  shardings, findings, and the global sources it records)."""
  known, findings = placements.known, placements.findings
  if id(original) not in known.made:
    return None
  if pipeline_batches.is_device_batched(original, known):
    findings.append(Finding(line, Kind.CHANGED, (
        f"{name}(..., {_count(original, known)}) -> each batch it stacks "
        "[devices, per_device, ...] merged to [devices * per_device, "
        f"...] (the same rows on each device) and placed with "
        f"{placements.said(B)} as it is read")))
    written = generator(placements.sharding(B), MERGED, names.code_of(
        updated))
    placements.global_sources.add(id(written))
    return written
  if pipeline_batches.is_shard_map(original, known):
    findings.append(Finding(line, Kind.CHANGED, (
        f"map({names.code_of(original.args[0].value)}, ...) -> each "
        f"global batch placed with {placements.said(B)} as it is read")))
    written = generator(placements.sharding(B), "_batch", names.code_of(
        updated.args[1].value))
    placements.global_sources.add(id(written))
    return written
  rows = pipeline_batches.rows_of(updated, known.counts)
  if rows is not None:
    findings.append(Finding(line, Kind.CHANGED, (
        "a batch stacked [devices, per_device, ...] by the pipeline -> "
        f"jax.make_array_from_process_local_data({placements.said(B)}, its "
        "rows [devices * per_device, ...]): the global batch where it "
        "is made, each device the rows pmap gave it")))
    return placements.placed(cst.parse_expression(rows), B)
  if name.endswith("prefetch_to_device"):
    findings.append(Finding(line, Kind.CHANGED, (
        f"{name}({names.code_of(original.args[0].value)}, n) of global "
        "batches -> the iterator itself: flax's prefetch_to_device "
        "would stack their rows again onto this process's devices")))
    return updated.args[0].value
  return None


def yielded(known, meta, original, updated):
  """A yielded tuple holding batches placed here: one element a line,
  each aligned after the tuple's parenthesis, as a person writes it.
  `meta`: the writer's `get_metadata`."""
  value = original.value
  if not (isinstance(value, cst.Tuple) and value.lpar and any(
      id(e.value) in known.made for e in value.elements)):
    return updated
  # Where the elements start, and the block's indent, which LibCST adds
  # to each continued line of a parsed expression.
  column = meta(metadata.PositionProvider, value).start.column
  indent = meta(metadata.PositionProvider, original).start.column
  parts = []
  for before, after in zip(value.elements, updated.value.elements):
    code = names.code_of(after.value)
    if id(before.value) in known.made:
      code = _aligned(" ".join(code.split()), column, indent)
    parts.append(code)
  return updated.with_changes(value=cst.parse_expression(
      "(" + (",\n" + " " * (column - indent)).join(parts) + ")"))


def dropped(known, original, updated):
  """`it = prefetch_to_device(it, 2)` of global batches: `it = it`, gone."""
  small = original.body[0] if len(original.body) == 1 else None
  if (isinstance(small, cst.Assign) and len(small.targets) == 1
      and id(small.value) in known.made
      and names.dotted(small.value.func).endswith("prefetch_to_device")
      and names.code_of(small.targets[0].target) == names.code_of(
          small.value.args[0].value)):
    return cst.RemoveFromParent()
  return updated


def _count(call, known) -> str:
  """The code of the device count `call` stacks by."""
  return next(names.code_of(a.value) for a in call.args
              if pipeline_batches.is_count(a.value, known.counts))


def _aligned(code: str, column: int, indent: int, width: int = 79) -> str:
  """`f(a, b)` written from `column`: on one line where it fits, else its
  arguments wrapped aligned after its parenthesis (continued lines less
  the block's `indent`, which LibCST adds)."""
  if column + len(code) + 2 <= width or "(" not in code:
    return code
  head, _, args = code.partition("(")
  return global_written.wrapped(head, [a.strip() for a in _split(
      args[:-1])], " " * (column - indent + len(head) + 1), width - column)


def _split(args: str) -> list[str]:
  """A call's arguments, split at its own commas."""
  parts, depth, start = [], 0, 0
  for i, char in enumerate(args):
    depth += char in "([{"
    depth -= char in ")]}"
    if char == "," and depth == 0:
      parts.append(args[start:i])
      start = i + 1
  return parts + [args[start:]]


# A batch stacked [devices, b, ...], its leading two axes merged: the rows.
MERGED = ("jax.tree.map(lambda _x: _x.reshape((-1,) + _x.shape[2:]), "
           "_batch)")


def generator(sharding, batch, source) -> cst.BaseExpression:
  """The global batches of `source`, each `batch` placed as it is read."""
  head = "jax.make_array_from_process_local_data"
  one = f"({head}({sharding}, {batch}) for _batch in {source})"
  if len(one) <= 66:
    return cst.parse_expression(one)
  return cst.parse_expression("(\n    " + global_written.wrapped(
      head, [sharding, batch], "        ", 72)
                              + f"\n    for _batch in {source})")
