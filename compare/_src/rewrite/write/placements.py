"""The global step's placements and reads: `Placements`.

What comes in: what the reading found to replace (`replace`: a read of a
replicated value by the value; `known`: the program's placements and the
batches its pipeline makes), the axis, and how a sharding is named
(`HelperShardings` on the helpers' mesh, or the module's mesh:
`global_plain.PlainShardings`). What goes out: each `replicate`/`shard`/
`prefetch_to_device` a placement on the mesh, each read of a replicated
value the value itself, the pipeline's batches placed where they are made
(`pipeline_written`), and a finding per change.
"""

import libcst as cst

from compare._src.rewrite.layouts import B, R
from compare._src.rewrite.plan.step_specs import spec
from compare._src.rewrite.read import global_idioms
from compare._src.rewrite.read import names
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.write import global_written
from compare._src.rewrite.write import pipeline_written


class HelperShardings:
  """Shardings on the helpers' mesh (`_pmap_mesh(axis)`)."""

  def __init__(self, axis_code):
    self._axis = axis_code

  def said(self, kind) -> str:
    """How the report names a placement's sharding of `kind`."""
    return f"NamedSharding(mesh, P({'' if kind == R else self._axis}))"

  def code(self, kind) -> str:
    """The code of the named sharding a placement of `kind` names."""
    return (f"jax.NamedSharding(_pmap_mesh({self._axis}), "
            f"{spec(kind, self._axis)})")


class Placements:
  """The global step's placements and reads, written; `findings` the
  step's (shared with its pmaps')."""

  def __init__(self, known, replace, shardings, findings):
    self.known, self._replace = known, replace
    self.shardings, self.findings = shardings, findings
    # The global batches' iterators written here (ids): a prefetch_to_device
    # of one is dropped.
    self.global_sources = set()
    self.column = 0  # where the call being written starts

  def said(self, kind) -> str:
    """How the report names a placement's sharding of `kind`."""
    return self.shardings.said(kind)

  def sharding(self, kind) -> str:
    """The code of the sharding a placement of `kind` names."""
    return self.shardings.code(kind)

  def placed(self, value, kind) -> cst.BaseExpression:
    """`value` placed with a sharding of `kind`, in 79 columns."""
    # A batch is each process's own rows of the global batch; device_put
    # onto a sharding over every process's devices would take it as the
    # whole batch (and check that every process passed the same).
    sharding = self.sharding(kind)
    code = names.code_of(value)
    width = 79 - self.column
    return cst.parse_expression(global_written.wrapped(
        "jax.device_put", [code, sharding], "    ", width) if kind == R else
        global_written.wrapped("jax.make_array_from_process_local_data",
                               [sharding, code], "    ", width))

  def call(self, original, updated, name, line):
    """The call written where it places or reads a value (`column`: where
    it starts); None where it is none of these."""
    if global_idioms.is_replicate_call(original, self.known):
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) -> jax.device_put(..., {self.said(R)}): "
          "the state placed once, no copy per device")))
      tree = updated.args[1 if name in global_idioms.TREE_MAPS else 0].value
      return self.placed(tree, R)
    if global_idioms.is_shard_call(original, self.known):
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) -> jax.make_array_from_process_local_data("
          f"{self.said(B)}, ...): the global batch "
          "(each process's rows), split over the mesh, no reshape to "
          "[devices, ...]")))
      return self.placed(updated.args[0].value, B)
    written = pipeline_written.pipeline_call(self, original, updated, name,
                                             line)
    if written is not None:
      return written
    if name.endswith("prefetch_to_device") and updated.args:
      return self._prefetched(name, line, updated.args[0].value)
    if id(original) in self._replace:
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) of a replicated value -> the value itself")))
      return self._inner(original)
    return None

  def subscript(self, original, updated, line):
    """`loss[0]` of a value the step reduced over the axis, now `P()`."""
    if id(original) in self._replace:
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{names.code_of(original)} of a value the step reduces "
          "over the axis (one value now, P()) -> "
          f"{names.code_of(self._replace[id(original)])}")))
      return self._inner(original)
    return updated

  def _prefetched(self, name, line, source):
    """`prefetch_to_device(source, n)` as a generator of global batches:
    `map(common_utils.shard, it)`'s `it` placed as it is; batches stacked
    elsewhere (flax imagenet's `prepare_tf_data`) unstacked first, their
    leading two axes merged, so each device holds pmap's rows."""
    if id(source) in self.global_sources:
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) of global batches -> the batches themselves: "
          "flax's prefetch_to_device would stack their rows again onto "
          "this process's devices")))
      return source
    if (isinstance(source, cst.Call) and names.dotted(source.func)
        in self.known.generators):
      # flax's prefetch_to_device re-stacks each array's rows (`list(x)`)
      # and puts them on a mesh of this process's devices: of a global
      # batch, a copy of every row (one process) or a failure (many).
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}({names.dotted(source.func)}(...), n) -> "
          f"{names.dotted(source.func)}(...): it yields global batches "
          "now, placed where they are made; flax's prefetch_to_device "
          "would stack their rows again onto this process's devices")))
      return source
    sharding = self.sharding(B)
    if (isinstance(source, cst.Call) and names.dotted(source.func)
        == "map" and len(source.args) == 2 and names.dotted(
            source.args[0].value).endswith("common_utils.shard")):
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(map(shard, ...)) -> each global batch placed with "
          f"{self.said(B)} as it is read")))
      return pipeline_written.generator(sharding, "_batch",
                                        names.code_of(source.args[1].value))
    self.findings.append(Finding(line, Kind.CHANGED, (
        f"{name}(...) of batches stacked [devices, b, ...] -> each batch "
        f"merged to [devices * b, ...] (the same rows on each device) and "
        f"placed with {self.said(B)} as it is read")))
    return pipeline_written.generator(sharding, pipeline_written.MERGED,
                                      names.code_of(source))

  def _inner(self, original):
    # The replaced node's inside, as rewritten (a read holds no pmap).
    return self._replace[id(original)].deep_clone()
