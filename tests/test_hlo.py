"""compare._src.measure.hlo's collective bytes: each collective counted at the unsharded
size it works on, so an fsdp step's all-gathers and reduce-scatters read
against data_parallel's all-reduce.
"""

import jax
from jax import lax
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from compare._src.measure import hlo

F32 = 4


def _three_collectives_text():
  """On each of 8 devices: an all-gather of its f32[8,3] shard into
  f32[64,3], a reduce-scatter of its f32[64,3] block into f32[8,3], and an
  all-reduce of an f32[8,3]."""
  mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Explicit,))

  def body(x, y):
    gathered = lax.all_gather(x, "d", tiled=True)
    scattered = lax.psum_scatter(y, "d", tiled=True)
    reduced = lax.psum(x, "d")
    return gathered.sum() + scattered.sum() + reduced.sum()

  step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("d"), P("d")),
                               out_specs=P(), check_vma=False))
  x, y = (jax.device_put(jnp.ones(shape), NamedSharding(mesh, P("d")))
          for shape in ((64, 3), (512, 3)))
  return step.lower(x, y).compile().as_text()


def test_each_collective_counts_its_unsharded_bytes():
  run = hlo.executed(_three_collectives_text())
  assert run.collectives["reduce-scatter"] == 1
  assert run.collective_bytes["all-gather"] == 64 * 3 * F32
  # The reduce-scatter's result is one shard, f32[8,3]: the group's 8
  # shards make the block it reduced.
  assert run.collective_bytes["reduce-scatter"] == 64 * 3 * F32
  assert run.collective_bytes["all-reduce"] == 8 * 3 * F32
  assert run.all_reduce_bytes == run.collective_bytes["all-reduce"]


def test_a_reduce_scatter_without_groups_counts_its_result():
  # Negative control of the group parsing: the iota form and no groups.
  iota = ("ENTRY %main () -> f32[4] {\n"
          "  %rs = f32[4]{0} reduce-scatter(%p), replica_groups=[2,4]<=[8], "
          "dimensions={0}\n}\n")
  bare = iota.replace(", replica_groups=[2,4]<=[8]", "")
  assert hlo.executed(iota).collective_bytes["reduce-scatter"] == 4 * 4 * F32
  assert hlo.executed(bare).collective_bytes["reduce-scatter"] == 4 * F32


def test_a_loop_multiplies_the_bytes_by_its_trips():
  text = ("%body (p: f32[4]) -> f32[4] {\n"
          "  %ag = f32[32]{0} all-gather(%p), replica_groups={{0,1,2,3,4,5,6,7}}\n"
          "}\n"
          "ENTRY %main () -> f32[4] {\n"
          '  %w = f32[4]{0} while(%x), condition=%cond, body=%body, '
          'backend_config={"known_trip_count":{"n":"3"}}\n'
          "}\n")
  assert hlo.executed(text).collective_bytes["all-gather"] == 3 * 32 * F32
