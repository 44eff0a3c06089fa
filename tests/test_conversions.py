"""`compare.replicate`: pmap's stacked layout, made without a host stack.

Through the public names only. Each device's row is put on that device
alone (issue 57): flax's `replicate` stacks every device's copy on the host
first, a transient host copy of the whole device-set (1.8 GB at 19.9M
parameters on 8 devices).
"""

import tracemalloc

import jax
import numpy as np
import pytest

import compare
from compare._src.prove import equivalence


@pytest.mark.parametrize("order", [slice(None, 4), slice(None, None, -1)])
def test_each_row_is_a_copy_on_its_own_device_in_the_order_given(order):
  devices = jax.local_devices()[order]
  tree = {"w": np.arange(12, dtype=np.float32).reshape(3, 4),
          "step": np.int32(7), "lr": 0.5, "on_device": jax.numpy.ones(2)}
  stacked = compare.replicate(tree, devices)
  for name, leaf in stacked.items():
    assert leaf.shape == (len(devices), *np.shape(tree[name])), name
    rows = sorted(leaf.addressable_shards, key=lambda s: s.index[0].start)
    assert [s.device for s in rows] == list(devices), name
    for shard in rows:
      assert np.array_equal(np.asarray(shard.data)[0],
                            np.asarray(tree[name], leaf.dtype)), name
  assert stacked["w"].dtype == np.float32 and stacked["step"].dtype == np.int32
  assert equivalence.trees_same_bits(compare.unreplicate(stacked)["w"],
                                     tree["w"])


def test_a_donating_pmap_step_takes_it_and_the_host_array_is_untouched():
  devices = jax.local_devices()[:4]
  host = np.ones(5, np.float32)
  step = jax.pmap(lambda x: x * 2, donate_argnums=0, devices=devices)
  out = step(step(compare.replicate(host, devices)))
  assert np.array_equal(np.asarray(out), np.full((4, 5), 4.0, np.float32))
  assert np.array_equal(host, np.ones(5, np.float32))  # copies, not views


def test_no_host_copy_of_every_device_row_is_made():
  devices = jax.local_devices()
  assert len(devices) == 8
  leaf = np.ones((1 << 20,), np.float32)  # 4 MiB
  tracemalloc.start()
  try:
    jax.block_until_ready(compare.replicate({"w": leaf}, devices))
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  # A host stack of 8 rows would be 32 MiB; each row put alone, about one.
  assert peak < 3 * leaf.nbytes, peak


def test_bitwise_comparison_sees_a_difference_past_its_first_chunk():
  a = np.zeros(equivalence.CHUNK * 2 + 3, np.float32)
  b = a.copy()
  assert equivalence.same_bits(a, b)
  b[-1] = -0.0  # a sign bit, in the last chunk
  assert not equivalence.same_bits(a, b)
  assert not equivalence.trees_same_bits({"x": a}, {"x": b})


def _ones_at(shape, alignment):
  """Ones whose data starts `alignment` bytes past a 64-byte boundary: at
  0, the numpy arrays XLA:CPU places zero-copy (an allocator gives either
  by chance)."""
  size = int(np.prod(shape))
  raw = np.ones(size + 32, np.float32)
  start = (alignment - raw.ctypes.data) % 64 // raw.itemsize
  ones = raw[start:start + size].reshape(shape)
  assert ones.ctypes.data % 64 == alignment
  return ones


@pytest.mark.parametrize("alignment", [0, 16])
@pytest.mark.parametrize("place", ["replicate", "to_mesh"])
def test_each_device_owns_its_buffer_so_a_donating_step_reuses_it(
    place, alignment):
  # A zero-copy placement gave all 8 devices the host row's memory, and a
  # donating step on it wrote fresh outputs (docs/jax-facts.md).
  devices = jax.local_devices()
  host = _ones_at((256, 512), alignment)
  if place == "replicate":
    placed = compare.replicate({"w": host}, devices)["w"]
    step = jax.pmap(lambda x: x * 2, donate_argnums=0, devices=devices)
  else:
    placed = compare.to_mesh({"w": host}, jax.make_mesh((8,), ("b",)))["w"]
    step = jax.jit(lambda x: x * 2, donate_argnums=0)
  given = {s.data.unsafe_buffer_pointer() for s in placed.addressable_shards}
  assert len(given) == len(devices)
  assert host.ctypes.data not in given
  out = step(placed)
  assert placed.is_deleted()
  assert {s.data.unsafe_buffer_pointer()
          for s in out.addressable_shards} == given
  assert np.array_equal(host, np.ones_like(host))
