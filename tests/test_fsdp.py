"""fsdp: each port one step close to the reference, pmap and shard_map the
same, the wrong-shard control caught, the state's memory per device within
1/N + 10% of data_parallel's, a checkpoint moving between data_parallel and
fsdp, and bad input refused in one line.

One step of 64 examples on 8 devices, cached per run.
"""

import jax
import numpy as np
import pytest

from compare._src import cli
from compare._src.measure import hlo
from compare._src.measure import state_bytes
from shardport.strategies import fsdp as strategy_module
from sharded import data_parallel as port_dp
from tests import helpers
from shardport.workloads import batches
from shardport.training import checkpoints
from shardport.workloads import configs
from shardport.workloads import registry

STRATEGY = strategy_module.Fsdp()
RUNS = {run.name: run for run in STRATEGY.runs}
CONFIG = configs.TrainConfig(global_batch=64, steps=1, input_shape=(8, 8, 1))
# One step differs from the reference only in summation order (N device
# gradients reduce-scattered then / N, against one sum over the batch), as
# for data_parallel: 1e-5 of a leaf's largest value is the strategy's own
# first-step tolerance.
TOLERANCE = helpers.leaf_scaled(STRATEGY.tolerances["first_step"].atol)
_RUNS = {}


def _run(name, data, module=None):
  spec = RUNS[name]
  if module is not None:
    return helpers.run(module, spec.variant, CONFIG, data, 8,
                       keep_states=True)
  if name not in _RUNS:
    _RUNS[name] = helpers.run(spec.module, spec.variant, CONFIG, data, 8,
                              keep_states=True)
  return _RUNS[name]


@pytest.mark.parametrize("name", ["pmap", "shard_map", "jit"])
def test_each_port_is_close_to_the_reference_after_one_step(digits, name):
  ported, truth = _run(name, digits), _run("reference", digits)
  helpers.assert_bitwise(ported.states[0], truth.states[0])  # the same init
  helpers.assert_close(ported.states[1], truth.states[1], TOLERANCE)


def test_pmap_equals_shard_map(digits):
  a, b = _run("pmap", digits), _run("shard_map", digits)
  for x, y in zip(a.states, b.states):
    helpers.assert_close(x, y, TOLERANCE)


def test_the_wrong_shard_control_is_caught(digits):
  planted = STRATEGY.control("wrong-shard").plant(RUNS["shard_map"].module,
                                                   "shard_map")
  wrong, truth = _run("shard_map", digits, planted), _run("reference", digits)
  with pytest.raises(AssertionError, match="differs by"):
    helpers.assert_close(wrong.states[1], truth.states[1], TOLERANCE)


@pytest.mark.parametrize("name", ["pmap", "shard_map", "jit"])
def test_state_per_device_is_within_one_nth_plus_ten_percent(name):
  module = RUNS[name].module
  state = module.create_state(0, CONFIG, module.make_placement(8))
  per = state_bytes.state_bytes_per_device(state)
  assert len(per) == 8
  # The whole state, counted from its shapes (independent of any sharding).
  shapes = jax.eval_shape(lambda: registry.init_state(0, CONFIG))
  full = sum(x.size * x.dtype.itemsize
             for x in jax.tree.leaves((shapes.params, shapes.opt_state)))
  dp = state_bytes.state_bytes_per_device(
      port_dp.create_state(0, CONFIG, port_dp.make_placement(8)))
  assert max(dp.values()) == full
  assert max(per.values()) <= (1 / 8 + strategy_module.MEMORY_TARGET) * full


@pytest.mark.parametrize("name", ["pmap", "shard_map"])
def test_the_host_layout_and_checkpoint_are_data_parallels(name, digits):
  module = RUNS[name].module
  placement = module.make_placement(8)
  state = module.create_state(0, CONFIG, placement)
  dp = port_dp.create_state(0, CONFIG, port_dp.make_placement(8))
  helpers.assert_bitwise(module.to_host(state), port_dp.to_host(dp))
  # A data_parallel checkpoint tree restores as fsdp, and back.
  saved = port_dp.CHECKPOINTS.to_checkpoint(checkpoints.saved_fields(dp))
  like = checkpoints.saved_fields(state)
  targets = module.CHECKPOINTS.checkpoint_target(like)
  arrays = jax.tree.map(lambda h, t: jax.device_put(np.asarray(h),
                                                    t.sharding), saved, targets)
  back = module.CHECKPOINTS.from_checkpoint(arrays, like)
  helpers.assert_bitwise(jax.tree.map(np.asarray, jax.device_get(
      module.CHECKPOINTS.to_checkpoint(back))), jax.tree.map(np.asarray, saved))


def _collective_bytes(module, variant, digits):
  placement = module.make_placement(8)
  state = module.create_state(0, CONFIG, placement)
  batch = module.put_batch(next(batches.train_batches(
      digits, 0, CONFIG.global_batch, 1)), placement)
  step = module.make_train_step(CONFIG, placement, variant)
  return hlo.executed(step.lower(state, batch).compile().as_text(
      )).collective_bytes


def test_shard_map_gathers_and_scatters_what_data_parallel_all_reduces(
    digits):
  params = sum(x.nbytes for x in jax.tree.leaves(
      port_dp.to_host(port_dp.create_state(
          0, CONFIG, port_dp.make_placement(8)))["params"]))
  fsdp_bytes = _collective_bytes(RUNS["shard_map"].module, "shard_map",
                                 digits)
  dp_bytes = _collective_bytes(port_dp, "shard_map", digits)
  # Every split parameter is gathered once and its gradient scattered once,
  # where data_parallel all-reduces every gradient. A leaf no axis of which
  # divides by 8 (the last bias, 10 floats) stays replicated and all-reduced,
  # as is the loss's pmean (4 bytes).
  assert fsdp_bytes["all-gather"] == fsdp_bytes["reduce-scatter"]
  assert dp_bytes["all-reduce"] == params + 4
  assert (fsdp_bytes["reduce-scatter"] + fsdp_bytes["all-reduce"] ==
          dp_bytes["all-reduce"])
  assert fsdp_bytes["all-reduce"] == 10 * 4 + 4
  assert dp_bytes["all-gather"] == dp_bytes["reduce-scatter"] == 0


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
  code = cli.main(["--strategy", "fsdp", "--batch-size", "30", "--json",
                   str(tmp_path / "r.json")])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1, err
  assert err.startswith("compare: error: ") and "30" in err, err
  assert not (tmp_path / "r.json").exists()
