"""pmap, shard_map, jit and the single-device reference agree, and can fail to.

The canary uses plain SGD (momentum 0): unlike Adam, SGD passes a gradient
scale error straight into the parameters, so the gradient trap cannot hide.
"""

import dataclasses

import chex
import jax
from jax import lax
from jax.sharding import PartitionSpec as P
import pytest

from compare import equivalence
from compare import tolerances
from compare.reference import data_parallel as reference
from legacy_pmap import data_parallel as legacy
from sharded import data_parallel as port
from sharded import devices
from tests import helpers
from workloads import batches
from workloads import configs
from workloads import datasets
from workloads import registry

FIRST = tolerances.get("data_parallel", "first_step")
FINAL = tolerances.get("data_parallel", "final")


def _config(data, **overrides):
  return configs.TrainConfig(**{
      "dataset": data.name, "input_shape": data.train_inputs.shape[1:],
      "global_batch": 64, "momentum": 0.0, **overrides})


def _verdict(a, b, tol=FIRST):
  return equivalence.compare_trees(a, b, tol)["verdict"]


def _trap_step(config, placement, variant="trap"):
  """The literal pmap recipe under shard_map with check_vma=True: N x grads."""
  del variant
  workload = registry.get(config.workload)

  def train_step(state, batch):
    loss, grads = jax.value_and_grad(workload.loss)(state.params, batch, 1)
    grads = lax.pmean(grads, axis_name=devices.AXIS)  # already summed: wrong
    return state.apply_gradients(grads=grads), {"loss": lax.pmean(
        loss, axis_name=devices.AXIS)}

  return jax.jit(jax.shard_map(train_step, mesh=placement,
                               in_specs=(P(), P(devices.AXIS)),
                               out_specs=P()))


@pytest.mark.parametrize("n_devices", [1, 2, 4, 8])
def test_sgd_canary_one_step(digits, n_devices):
  config = _config(digits)
  truth = helpers.train(reference, "reference", config, digits, n_devices, 1)
  pmapped = helpers.train(legacy, "pmap", config, digits, n_devices, 1)
  mapped = helpers.train(port, "shard_map", config, digits, n_devices, 1)
  jitted = helpers.train(port, "jit", config, digits, n_devices, 1)
  # pmap is jit over shard_map(check_vma=False) in jax 0.10: same program.
  chex.assert_trees_all_equal(pmapped, mapped)
  for run in (pmapped, mapped, jitted):
    assert _verdict(run, truth) in (equivalence.BITWISE, equivalence.CLOSE)


@pytest.mark.parametrize("n_devices", [2, 8])
def test_canary_catches_the_gradient_trap(digits, n_devices, monkeypatch):
  config = _config(digits)
  truth = helpers.train(reference, "reference", config, digits, n_devices, 1)
  monkeypatch.setattr(port, "make_train_step", _trap_step)
  trapped = helpers.train(port, "trap", config, digits, n_devices, 1)
  assert _verdict(trapped, truth) == equivalence.DIFFER


@pytest.mark.parametrize("perturb", [
    {"learning_rate": configs.TrainConfig.learning_rate * 1.01},  # 1% step
    {"seed": 1},  # another init and batch order
])
def test_negative_control_first_step(digits, perturb):
  config = _config(digits)
  truth = helpers.train(reference, "reference", config, digits, 8, 1)
  base = helpers.train(port, "shard_map", config, digits, 8, 1)
  moved = helpers.train(port, "shard_map",
                        dataclasses.replace(config, **perturb), digits, 8, 1)
  assert _verdict(base, truth) != equivalence.DIFFER
  assert _verdict(moved, truth) == equivalence.DIFFER


def test_negative_control_one_changed_example(digits):
  config = _config(digits)
  truth = helpers.train(reference, "reference", config, digits, 8, 1)
  # Invert the one example that lands first in the first global batch.
  index = batches.batch_order(0, len(digits.train_inputs), 64, 1)[0, 0]
  inputs = digits.train_inputs.copy()
  inputs[index] = 1.0 - inputs[index]
  changed = digits._replace(train_inputs=inputs)
  moved = helpers.train(port, "shard_map", config, changed, 8, 1)
  assert _verdict(moved, truth) == equivalence.DIFFER


def test_momentum_run_stays_close_to_reference(digits):
  config = _config(digits, momentum=0.9, steps=8)
  truth = helpers.train(reference, "reference", config, digits, 8)
  for module, variant in ((legacy, "pmap"), (port, "shard_map"), (port, "jit")):
    run = helpers.train(module, variant, config, digits, 8)
    assert _verdict(run, truth, FINAL) != equivalence.DIFFER, variant


def test_linreg_three_ways_match_reference():
  data = datasets.load("linreg")
  config = configs.TrainConfig(
      workload="linreg", dataset="linreg", input_shape=(1,),
      **{**registry.get("linreg").defaults, "steps": 10})
  truth = helpers.train(reference, "reference", config, data, 8)
  pmapped = helpers.train(legacy, "pmap", config, data, 8)
  chex.assert_trees_all_equal(
      pmapped, helpers.train(port, "shard_map", config, data, 8))
  for run in (pmapped, helpers.train(port, "jit", config, data, 8)):
    assert _verdict(run, truth, FINAL) != equivalence.DIFFER
  wrong = dataclasses.replace(config, learning_rate=config.learning_rate * 2)
  assert _verdict(helpers.train(port, "jit", wrong, data, 8), truth,
                  FINAL) == equivalence.DIFFER
