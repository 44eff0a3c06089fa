"""The reading of the pipeline's own batches, mixed into the global reader.

`global_reader.Reader` takes `PipelineReads`: before any read it finds the
program's batch generators and device counts (`pipeline_batches`); as it
reads, a call of one is an iterator of global batches (a `for` over it
binds global batches), a yield of a made batch is followed, and a
`prefetch_to_device` of such an iterator is dropped (what flax's does to a
global batch: docs/REWRITE.md). The ids of the nodes the writer places or
drops go in `known.made`.
"""

import libcst as cst

from compare._src.rewrite.layouts import Blocker
from compare._src.rewrite.read.pipeline_batches import count_names
from compare._src.rewrite.read.pipeline_batches import generators
from compare._src.rewrite.read.pipeline_batches import is_device_batched
from compare._src.rewrite.read.pipeline_batches import is_shard_map
from compare._src.rewrite.read.pipeline_batches import stackers


class PipelineReads:
  """The reading of the pipeline's batches, mixed into
  `global_reader.Reader` (its `known`, `_followed`, `_allow`, `_scope`)."""

  def visit_Module(self, node):
    """The pipeline's batch generators and device counts, before any read:
    a generator may be defined below its first caller."""
    self.known.counts = count_names(node)
    self.known.stackers = stackers(node)
    found, made, returned = generators(node, self.known)
    self.known.generators, self.known.made = found, made
    # The batch generators' calls: each must be read where the reading
    # follows it, as its yields are written global (`pipeline_checked`).
    self._generator_calls, self._followed_calls = [], set(returned)
    # (scope, name) -> how many bindings make it an iterator of global
    # batches; each `prefetch_to_device(name, n)` with its name node.
    self._batches_bound, self._prefetched = {}, []
    return True

  def bound_to_batches(self, name: str) -> None:
    """`name = g(...)` of an iterator of global batches, in this scope."""
    key = (self._scope[-1], name)
    self._batches_bound[key] = self._batches_bound.get(key, 0) + 1

  def prefetched_name(self, node) -> bool:
    """`prefetch_to_device(name, n)`: noted, judged once every binding of
    `name` is read (`prefetches_checked`)."""
    source = node.args[0].value
    if isinstance(source, cst.Name):
      self._prefetched.append((self._scope[-1], source, node))
      return True
    return False

  def prefetches_checked(self) -> None:
    """A prefetch of a name bound only to iterators of global batches once
    written (each "biter": a generator's, or a prefetch the writer turns
    into one, `it = prefetch(it, 2)` too), one at least a generator's, is
    dropped by the writer and read as that iterator; any other keeps the
    reading it had (a prefetch of batches the program stacked)."""
    for scope, source, node in self._prefetched:
      key = (scope, source.value)
      kinds = [a.kind for a in self.assigns.get(key, [])]
      if self._batches_bound.get(key) and all(k == "biter" for k in kinds):
        # The read was taken as the prefetch's source: an iterator's now.
        for read in self.reads:
          if read[4] is source:
            read[3].add("biter")
        self.known.made.add(id(node))

  def _batches_made(self, node) -> bool:
    """`_batch_generator_call`, or `map(shard, it)` read by a `for` or
    bound to a name (in a prefetch, `global_rewriter` writes it)."""
    if is_shard_map(node, self.known):
      self.known.made.add(id(node))
      return True
    return self._batch_generator_call(node)

  def _batch_generator_call(self, node) -> bool:
    """`g(...)` of one of the program's batch generators, or a stacking
    generator's call that stacks one batch a device: it yields global
    batches once written (the latter placed by the writer, recorded)."""
    if is_device_batched(node, self.known):
      self.known.made.add(id(node))
      return True
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
        and node.func.value in self.known.generators):
      self._followed_calls.add(id(node))
      return True
    return False

  def note_pipeline_call(self, node, line) -> None:
    """Each call of a batch generator, checked in `pipeline_checked`."""
    if (isinstance(node.func, cst.Name)
        and node.func.value in self.known.generators):
      self._generator_calls.append((line, node))

  def pipeline_checked(self) -> None:
    """A batch generator's call read elsewhere than a `for`, `x = g(...)`,
    a prefetch or a function returning it (`list(g())`, an argument)
    would see global batches where it saw stacked ones: a place."""
    self.prefetches_checked()
    for line, node in self._generator_calls:
      if id(node) not in self._followed_calls:
        self.blockers.append(Blocker(line, (
            f"{node.func.value}(...) yields global batches now (placed "
            "where they are made) and its value goes where this reading "
            "does not follow it: read it in a for loop, as `x = "
            f"{node.func.value}(...)` or through prefetch_to_device")))

  def visit_Yield(self, node):
    """A batch generator's yield: its made batches are placed where made
    (followed), a name bound to one read as the batch it is."""
    if self._scope[-1] not in self.known.generators:
      return True
    value = node.value
    # A tuple's elements hold their values; a bare value is its own (a
    # Name's `.value` is its string: `yield batch` was never read).
    for part in ([e.value for e in value.elements]
                 if isinstance(value, cst.Tuple) else [value]):
      if id(part) in self.known.made:
        self._followed.add(id(part))
      elif isinstance(part, cst.Name):
        self._allow(part, "yield")
    return True
