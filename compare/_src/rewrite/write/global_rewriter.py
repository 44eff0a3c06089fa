"""The global step written with the first step's helpers: `GlobalRewriter`.

What comes in: the steps' layouts (`global_layouts.read`), the placements
and reads to replace, the axis. What goes out: the module rewritten, each
pmap with its global in_specs and out_specs, each `replicate`/`shard`/
`prefetch_to_device` a placement on the mesh, each read of a replicated
value the value itself, and a finding per change; `blockers` where the
writing meets what the global step cannot take. `global_plain` writes the
same step without the helpers, over this one.
"""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.plan import global_layouts
from compare._src.rewrite.plan.global_layouts import B, R
from compare._src.rewrite.read import global_idioms
from compare._src.rewrite.read import names
from compare._src.rewrite.records import Finding
from compare._src.rewrite.records import Kind
from compare._src.rewrite.write import global_written
from compare._src.rewrite.write import pipeline_written
from compare._src.rewrite.write import rewrite_pmap


def spec(kind, axis_code) -> str:
  """The `jax.P` of a value of layout `kind` over the axis `axis_code`."""
  return "jax.P()" if kind == R else f"jax.P({axis_code})"


class GlobalRewriter(pipeline_written.PipelineWriter,
                     rewrite_pmap.PmapRewriter):
  """The first step's rewriter with each step's global layout, and the
  placements and reads of the global step."""

  def __init__(self, aliases, steps, replace, axis_code, known,
               declared=None):
    super().__init__(aliases)
    self._steps = {s.line: s for s in steps.values()}
    self._replace, self._axis, self._known = replace, axis_code, known
    self._declared = declared
    self.blockers = []  # found while writing: the global step is not taken
    # The global batches' iterators written here (ids): a prefetch_to_device
    # of one is dropped.
    self._global_sources = set()

  def _layout(self, line, in_axes, out_axes, axis):
    step = self._steps[line]
    given = (in_axes if isinstance(in_axes, tuple)
             else (in_axes,) * len(step.args))
    if step.name != self._declared:
      # A value the program replicated or sharded, given to an argument
      # pmap broadcasts: each device saw the whole stacked [devices, ...]
      # array, which the global placement no longer is.
      self.blockers += [global_layouts.Blocker(line, (
          f"argument {i} of {step.name} is {kind} (made by a "
          f"{'replicate' if kind == R else 'shard'} the second step "
          "rewrites) but the pmap broadcasts it (in_axes=None): each device "
          "saw the whole stacked [devices, ...] array; place it by hand"))
                        for i, (axis_in, kind) in enumerate(zip(given,
                                                                step.args))
                        if axis_in is None and kind in (R, B)]
    kinds = [None if axis_in is None else kind
             for axis_in, kind in zip(given, step.args)]
    stacked = [str(i) for i, k in enumerate(kinds) if k == global_layouts.S]
    if stacked:
      self.findings.append(Finding(line, Kind.KEPT, (
          f"{step.name}'s argument(s) {', '.join(stacked)} keep pmap's "
          "stacked layout [devices, ...]: made by no replicate, shard or "
          "prefetch_to_device the second step knows (a key per device stays "
          "so; a state or batch stacked by hand is placed by hand: "
          "docs/MIGRATION.md#idiom-map)")))
    self.kinds = kinds  # the written step's specs (`global_plain`)
    in_axes = tuple(None if k in (R, B, None) else 0 for k in kinds)
    in_code = "(" + ", ".join(
        "jax.P()" if k in (R, None) else f"jax.P({axis})" for k in kinds
    ) + ("," if len(kinds) == 1 else "") + ")"
    outs = step.outs if step.outs is not None else global_layouts.S
    if isinstance(outs, list):
      given = (out_axes if isinstance(out_axes, tuple)
               else (out_axes,) * len(outs))
      outs = [None if a is None else k for a, k in zip(given, outs)]
      out_axes = tuple(None if k in (R, None) else 0 for k in outs)
      out_code = "(" + ", ".join(
          "jax.P()" if k in (R, None) else f"jax.P({axis})" for k in outs
      ) + ("," if len(outs) == 1 else "") + ")"
    else:
      out_axes = None if outs == R or out_axes is None else 0
      out_code = spec(R if out_axes is None else B, axis)
    self.outs = outs if isinstance(outs, list) else [
        R if out_axes is None else global_layouts.S]
    self.one_out = not isinstance(outs, list)
    return in_axes, out_axes, in_code, out_code

  def _said(self, kind) -> str:
    """How the report names a placement's sharding of `kind`."""
    return f"NamedSharding(mesh, P({'' if kind == R else self._axis}))"

  def _sharding(self, kind) -> str:
    """The code of the named sharding a placement of `kind` names."""
    return (f"jax.NamedSharding(_pmap_mesh({self._axis}), "
            f"{spec(kind, self._axis)})")

  def _placed(self, value, kind) -> cst.BaseExpression:
    # A batch is each process's own rows of the global batch; device_put
    # onto a sharding over every process's devices would take it as the
    # whole batch (and check that every process passed the same).
    sharding = self._sharding(kind)
    code = names.code_of(value)
    width = 79 - self._column
    return cst.parse_expression(global_written.wrapped(
        "jax.device_put", [code, sharding], "    ", width) if kind == R else
        global_written.wrapped("jax.make_array_from_process_local_data",
                               [sharding, code], "    ", width))

  def leave_Call(self, original, updated):
    line = self._line(original)
    # Where the call starts: a placement written there stays in 79 columns.
    self._column = self.get_metadata(metadata.PositionProvider,
                                     original).start.column
    name = names.dotted(original.func)
    if global_idioms.is_replicate_call(original, self._known):
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) -> jax.device_put(..., {self._said(R)}): "
          "the state placed once, no copy per device")))
      tree = updated.args[1 if name in global_idioms.TREE_MAPS else 0].value
      return self._placed(tree, R)
    if global_idioms.is_shard_call(original, self._known):
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) -> jax.make_array_from_process_local_data("
          f"{self._said(B)}, ...): the global batch "
          "(each process's rows), split over the mesh, no reshape to "
          "[devices, ...]")))
      return self._placed(updated.args[0].value, B)
    written = self.pipeline_call(original, updated, name, line)
    if written is not None:
      return written
    if name.endswith("prefetch_to_device") and updated.args:
      return self._prefetched(name, line, updated.args[0].value)
    if id(original) in self._replace:
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) of a replicated value -> the value itself")))
      return self._inner(original)
    return super().leave_Call(original, updated)

  def leave_Subscript(self, original, updated):
    # `loss[0]` of a value the step reduced over the axis, now `P()`.
    if id(original) in self._replace:
      self.findings.append(Finding(self._line(original), Kind.CHANGED, (
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
    if id(source) in self._global_sources:
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(...) of global batches -> the batches themselves: "
          "flax's prefetch_to_device would stack their rows again onto "
          "this process's devices")))
      return source
    if (isinstance(source, cst.Call) and names.dotted(source.func)
        in self._known.generators):
      # flax's prefetch_to_device re-stacks each array's rows (`list(x)`)
      # and puts them on a mesh of this process's devices: of a global
      # batch, a copy of every row (one process) or a failure (many).
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}({names.dotted(source.func)}(...), n) -> "
          f"{names.dotted(source.func)}(...): it yields global batches "
          "now, placed where they are made; flax's prefetch_to_device "
          "would stack their rows again onto this process's devices")))
      return source
    sharding = self._sharding(B)
    if (isinstance(source, cst.Call) and names.dotted(source.func)
        == "map" and len(source.args) == 2 and names.dotted(
            source.args[0].value).endswith("common_utils.shard")):
      self.findings.append(Finding(line, Kind.CHANGED, (
          f"{name}(map(shard, ...)) -> each global batch placed with "
          f"{self._said(B)} as it is read")))
      return pipeline_written.generator(sharding, "_batch",
                        names.code_of(source.args[1].value))
    self.findings.append(Finding(line, Kind.CHANGED, (
        f"{name}(...) of batches stacked [devices, b, ...] -> each batch "
        f"merged to [devices * b, ...] (the same rows on each device) and "
        f"placed with {self._said(B)} as it is read")))
    return pipeline_written.generator(sharding, pipeline_written.MERGED, names.code_of(source))

  def _inner(self, original):
    # The replaced node's inside, as rewritten (a read holds no pmap).
    return self._replace[id(original)].deep_clone()


