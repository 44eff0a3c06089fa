"""A `Port`'s batches by step (`Port.batches`), whichever way it gives them:
a function of the step, or an iterable read once."""

from compare._src.prove.port_steps import PortError


class Batches:
  """A `Port`'s batches by step, whichever way it gives them.

  An iterable is read once, in order; the first few batches are kept for
  the timing windows.
  """

  KEPT = 4

  def __init__(self, batches):
    self._call = batches if callable(batches) else None
    self._iter = None if self._call else iter(batches)
    self._kept = []

  def __call__(self, step: int):
    if self._call:
      return self._call(step)
    if step < len(self._kept):
      return self._kept[step]
    batch = next(self._iter, None)
    if batch is None:
      raise PortError(f"batches: ran out at step {step + 1}")
    if len(self._kept) < self.KEPT:
      self._kept.append(batch)
    return batch

  def first(self, count: int):
    """The first `count` batches, or as many as an iterable holds (already
    read ones are kept): a port of fewer steps times on fewer batches."""
    if self._call:
      return [self._call(i) for i in range(count)]
    out = []
    for i in range(count):
      try:
        out.append(self(i))
      except PortError:  # an iterable of fewer batches: all it had
        break
    return out
