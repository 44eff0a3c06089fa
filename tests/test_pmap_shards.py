"""pmap's pieces on their devices own their memory (`pmap_shards._owned`):
XLA:CPU puts a 64-byte aligned numpy row on a device without a copy, and a
donating pmap step would then write into the host's memory."""

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from compare._src.prove import pmap_shards


def _aliased(array, host):
  start = host.ctypes.data
  return [start <= s.data.unsafe_buffer_pointer() < start + host.nbytes
          for s in array.addressable_shards]


def test_a_piece_aliasing_any_row_of_the_host_is_copied():
  # A (32,) float32 leaf in 8 pieces of 16 bytes, its first row 16 bytes
  # past a 64-byte boundary: row 3 is aligned, row 0 is not.
  buffer = np.zeros(64, np.float32)
  skip = next(i for i in range(16)
              if (buffer[i:].ctypes.data % 64) == 16)
  host = buffer[skip:skip + 32].reshape(8, 4)
  host[:] = np.arange(32).reshape(8, 4)
  devices = jax.devices()[:8]
  sharding = NamedSharding(jax.sharding.Mesh(np.array(devices), ("d",)),
                           P("d"))
  placed = jax.make_array_from_single_device_arrays(
      host.shape, sharding,
      [jax.device_put(row[None], d) for row, d in zip(host, devices)])
  assert any(_aliased(placed, host)) and not _aliased(placed, host)[0]
  owned = pmap_shards._owned(placed, host)  # pylint: disable=protected-access
  assert not any(_aliased(owned, host))
  np.testing.assert_array_equal(np.asarray(owned), host)
