"""fsdp where gloo carries the collectives: no reduce-scatter of gloo's.

gloo's reduce-scatter now and then leaves wrong values in rank 0's block
(jax-ml/jax#40830): identical 2-process fsdp jobs ended with two digests,
their states first differing after step 1 in device 0's block of the one
large gradient (docs/jax-facts.md, Multi-process). Where gloo carries the
collectives (every `jax.distributed` job on CPU), fsdp all-reduces the
gradient and takes each device's block instead
(`shardport.strategies.fsdp.reduce_scatter`). Checked in one process by
telling the strategy that its collectives are gloo's: the step compiles no
reduce-scatter in either backend, each device's block is psum_scatter's
bit for bit where the sums are exact, and the wrong-shard control still
moves the state. 52 s measured on 2 cores shared with other jobs
(load about 15); most of it the first compile of the CNN step.
"""

import jax
from jax import lax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from compare._src.measure import hlo
from legacy_pmap import fsdp as pmap_fsdp
from sharded import fsdp as sharded_fsdp
from shardport.strategies import fsdp as strategy_module
from shardport.workloads import batches
from shardport.workloads import configs
from tests import helpers

CONFIG = configs.TrainConfig(global_batch=64, steps=1, input_shape=(8, 8, 1))
BACKENDS = {"shard_map": sharded_fsdp, "pmap": pmap_fsdp}


@pytest.fixture(params=[False, True], ids=["in-process", "gloo"])
def gloo(request, monkeypatch):
  """Whether the strategy is told that gloo carries its collectives."""
  if request.param:
    monkeypatch.setattr(strategy_module, "reduce_scatter_is_safe",
                        lambda: False)
  return request.param


def _executed(module, variant, digits):
  placement = module.make_placement(8)
  state = module.create_state(0, CONFIG, placement)
  batch = module.put_batch(next(batches.train_batches(
      digits, 0, CONFIG.global_batch, 1)), placement)
  step = module.make_train_step(CONFIG, placement, variant)
  return hlo.executed(step.lower(state, batch).compile().as_text())


@pytest.mark.parametrize("variant", list(BACKENDS))
def test_under_gloo_the_step_all_reduces_what_it_reduce_scattered(
    digits, gloo, variant):
  moved = _executed(BACKENDS[variant], variant, digits).collective_bytes
  if not gloo:
    assert moved["reduce-scatter"] > 0, moved
    return
  assert moved.get("reduce-scatter", 0) == 0, moved
  # The gradient's bytes all-reduced: every split leaf, as the gathers move
  # them, beside the replicated bias (10 floats) and the loss (4 bytes).
  assert moved["all-reduce"] == moved["all-gather"] + 10 * 4 + 4, moved


@pytest.mark.parametrize("axis", [0, 1])
def test_each_device_gets_psum_scatters_block(gloo, axis):
  """Integer-valued floats sum exactly in any order: the blocks must be
  psum_scatter's bit for bit, on the device psum_scatter puts them on."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  rows = np.random.default_rng(0).integers(-50, 50, size=(8, 16, 24))
  x = jax.device_put(rows.astype(np.float32),
                     jax.sharding.NamedSharding(mesh, P("data")))

  def block(fn):
    return jax.jit(jax.shard_map(lambda v: fn(v[0])[None], mesh=mesh,
                                 in_specs=P("data"), out_specs=P("data"),
                                 check_vma=False))(x)

  got = block(lambda v: strategy_module.reduce_scatter(v, "data", axis, 8))
  want = block(lambda v: lax.psum_scatter(v, "data", scatter_dimension=axis,
                                          tiled=True))
  helpers.assert_bitwise(np.asarray(got), np.asarray(want))
  # Not every device the same block: a wrong block would be caught.
  assert len({np.asarray(s.data).tobytes() for s in got.addressable_shards
              }) == 8


def test_under_gloo_the_wrong_shard_control_still_moves_the_state(
    digits, monkeypatch):
  # In process, tests/test_fsdp.py catches it.
  monkeypatch.setattr(strategy_module, "reduce_scatter_is_safe",
                      lambda: False)
  planted = strategy_module.Fsdp().control("wrong-shard").plant(
      sharded_fsdp, "shard_map")
  right = helpers.run(sharded_fsdp, "shard_map", CONFIG, digits, 8,
                      keep_states=True)
  wrong = helpers.run(planted, "shard_map", CONFIG, digits, 8,
                      keep_states=True)
  with pytest.raises(AssertionError):
    helpers.assert_bitwise(wrong.states[1], right.states[1])
