"""Flax's FSDP route (docs/flax_partitioning.py) against the fsdp strategy.

Two steps of linear512 (64 rows, 8 devices) through flax's logical axis
rules under `jax.jit` and through `sharded.fsdp`'s shard_map port on the
same batches from the same key: every leaf of the state (params and Adam's
moments) split alike, the same losses and parameters to the strategy's
own first-step tolerance. A rule that maps no logical axis to the mesh
leaves the state whole on every device, and the split check fails.
"""

from unittest import mock

import flax.linen as nn
import jax

from docs import flax_partitioning as flax_route
from sharded import fsdp as ours
from shardport import strategies
from shardport.workloads import batches
from shardport.workloads import datasets
from tests import helpers

STRATEGY = strategies.get("fsdp")
TOLERANCE = helpers.leaf_scaled(STRATEGY.tolerances["first_step"].atol)


def _shard_shapes(state):
  """Each leaf's shape on one device, params then optimizer state."""
  trees = nn.meta.unbox((state.params, state.opt_state))
  return [leaf.addressable_shards[0].data.shape
          for leaf in jax.tree.leaves(trees)]


def test_flax_rules_split_and_train_as_our_fsdp():
  data = datasets.load("linear512")
  config = STRATEGY.make_config(
      {"workload": "linear512", "steps": 2, "global_batch": 64}, data)
  run = helpers.run(ours, "shard_map", config, data, 8)
  order = batches.train_batches(data, config.seed, config.global_batch,
                                config.steps)
  state, losses = flax_route.train(order, config.seed,
                                   learning_rate=config.learning_rate)

  shapes = _shard_shapes(state)
  assert shapes == _shard_shapes(run.state)
  assert (64, 1) in shapes  # the kernel and its moments: 512 / 8 rows each
  helpers.assert_close([{"loss": x} for x in losses], run.metrics, TOLERANCE)
  helpers.assert_close(jax.device_get(nn.meta.unbox(state.params)),
                       run.host["params"], TOLERANCE)

  # The negative control: no rule sends "embed" to the mesh.
  with mock.patch.object(flax_route, "RULES", (("embed", None),
                                               ("out", None))):
    whole, _ = flax_route.sharded_state(flax_route.mesh_of(8),
                                        jax.random.key(config.seed))
  assert _shard_shapes(whole) != shapes
