"""What a proof holds at each lockstep boundary: device sets, host copies.

A census of the devices' live buffers (each counted once, however many
arrays view it) in sets of the 8 devices' state, and of the host's numpy
arrays (numpy reports them to tracemalloc in a domain of their own) in
copies of one device's state, taken as each free-running step starts,
as each check measures its band, and after each check. `tests/test_prove_memory.py` holds a proof to it;
`python -m bench.runners.prove_scale --census` prints it beside peak RSS.
"""

import contextlib
import gc
import tracemalloc

import jax
import numpy as np

from compare._src.prove import lockstep

DEVICES = 8


def live_buffers() -> dict:
  """`{(device id, buffer address): bytes}` of every live device buffer,
  each counted once however many arrays view it."""
  buffers = {}
  for array in jax.live_arrays():
    if array.is_deleted():
      continue
    for shard in array.addressable_shards:
      buffers[(shard.device.id, shard.data.unsafe_buffer_pointer())] = (
          shard.data.nbytes)
  return buffers


def device_sets(state_bytes: int, alive_before=frozenset()) -> float:
  """Unique live device buffers but those in `alive_before` (alive before
  the proof: another test's in the same process), in sets of `DEVICES`
  copies of a state of `state_bytes`."""
  return sum(size for key, size in live_buffers().items()
             if key not in alive_before) / (DEVICES * state_bytes)


def host_bytes() -> int:
  """The bytes of every numpy array alive (tracemalloc must be tracing)."""
  snapshot = tracemalloc.take_snapshot().filter_traces(
      [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
  return sum(stat.size for stat in snapshot.statistics("filename"))


@contextlib.contextmanager
def counted(patch, state_bytes: int, host: bool = False):
  """Counts at every `Lockstep.before_step` and `after_step` while inside:
  yields the list of counts, `(device sets, host copies over what was
  alive on entry or None without host)`. `patch(obj, name, value)`
  installs the hook (pytest's `monkeypatch.setattr`, or `setattr`)."""
  seen = []
  if host:
    tracemalloc.start()
  baseline = host_bytes() if host else 0
  # What was alive on entry is not the proof's (a test run before it in
  # the same process can leave arrays alive). Garbage first: a buffer
  # freed during the proof could lend its address to one of the proof's.
  gc.collect()
  alive_before = frozenset(live_buffers())

  def count():
    seen.append((device_sets(state_bytes, alive_before),
                 (host_bytes() - baseline)
                 / state_bytes if host else None))

  def hooked(method, first):
    def call(self, *args, **kwargs):
      if first:
        count()
      method(self, *args, **kwargs)
      if not first:
        count()
    return call

  # `_calibrate`'s count comes first: the calibration's result, the shared
  # state and the truth's own step are all alive then (the host's peak).
  originals = {name: getattr(lockstep.Lockstep, name)
               for name in ("before_step", "after_step", "_calibrate")}
  for name, method in originals.items():
    patch(lockstep.Lockstep, name, hooked(method, name == "_calibrate"))
  try:
    yield seen
  finally:
    if host:
      tracemalloc.stop()
    if patch is setattr:
      for name, method in originals.items():
        setattr(lockstep.Lockstep, name, method)
