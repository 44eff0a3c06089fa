"""pmap, shard_map, jit and the single-device reference agree, and can fail to.

The canary uses plain SGD (momentum 0): unlike Adam, SGD passes a gradient
scale error straight into the parameters, so the gradient trap cannot hide.
"""

import dataclasses

import pytest

from compare._src.prove import equivalence
from shardport.strategies import negative_controls
from shardport import strategies
from tests import helpers
from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import datasets
from shardport.workloads import registry

STRATEGY = strategies.get("data_parallel")
RUNS = {run.name: run for run in STRATEGY.runs}
PORTS = [name for name in RUNS if name != "reference"]
FIRST = STRATEGY.tolerances["first_step"]
FINAL = STRATEGY.tolerances["final"]


def _config(data, **overrides):
  return configs.TrainConfig(**{
      "dataset": data.name, "input_shape": data.train_inputs.shape[1:],
      "global_batch": 64, "momentum": 0.0, **overrides})


def _train(name, config, data, n_devices, steps=None, module=None):
  run = RUNS[name]
  return helpers.train(module or run.module, run.variant, config, data,
                       n_devices, steps)


@pytest.mark.parametrize("n_devices", [1, 2, 4, 8])
def test_sgd_canary_one_step(digits, n_devices):
  config = _config(digits)
  states = {name: _train(name, config, digits, n_devices, 1) for name in RUNS}
  # pmap is jit over shard_map(check_vma=False) in jax 0.10: same program.
  helpers.assert_bitwise(states["pmap"], states["shard_map"])
  for name in PORTS:
    helpers.assert_close(states[name], states["reference"], FIRST)


@pytest.mark.parametrize("n_devices", [2, 8])
def test_canary_catches_the_gradient_trap(digits, n_devices):
  config = _config(digits)
  truth = _train("reference", config, digits, n_devices, 1)
  # The port itself, built with check_vma=True: its pmean of the gradients
  # then makes them N times too large.
  trapped = _train("shard_map", config, digits, n_devices, 1,
                   negative_controls.gradient_trap(RUNS["shard_map"].module,
                                                   "shard_map"))
  assert helpers.verdict(trapped, truth, FIRST) == equivalence.DIFFER


@pytest.mark.parametrize("perturb", [
    {"learning_rate": configs.TrainConfig.learning_rate * 1.01},  # 1% step
    {"seed": 1},  # another init and batch order
])
def test_negative_control_first_step(digits, perturb):
  config = _config(digits)
  truth = _train("reference", config, digits, 8, 1)
  base = _train("shard_map", config, digits, 8, 1)
  moved = _train("shard_map", dataclasses.replace(config, **perturb), digits,
                 8, 1)
  assert helpers.verdict(base, truth, FIRST) != equivalence.DIFFER
  assert helpers.verdict(moved, truth, FIRST) == equivalence.DIFFER


def test_negative_control_one_changed_example(digits):
  config = _config(digits)
  truth = _train("reference", config, digits, 8, 1)
  # Invert the one example that lands first in the first global batch.
  index = batches.batch_order(0, len(digits.train_inputs), 64, 1)[0, 0]
  inputs = digits.train_inputs.copy()
  inputs[index] = 1.0 - inputs[index]
  changed = digits._replace(train_inputs=inputs)
  moved = _train("shard_map", config, changed, 8, 1)
  assert helpers.verdict(moved, truth, FIRST) == equivalence.DIFFER


def test_momentum_run_stays_close_to_reference(digits):
  config = _config(digits, momentum=0.9, steps=8)
  truth = _train("reference", config, digits, 8)
  for name in PORTS:
    assert helpers.verdict(_train(name, config, digits, 8), truth,
                           FINAL) != equivalence.DIFFER, name


def test_linreg_three_ways_match_reference():
  data = datasets.load("linreg")
  config = configs.TrainConfig(
      workload="linreg", dataset="linreg", input_shape=(1,),
      **{**registry.get("linreg").defaults, "steps": 10})
  states = {name: _train(name, config, data, 8) for name in RUNS}
  helpers.assert_bitwise(states["pmap"], states["shard_map"])
  for name in PORTS:
    assert helpers.verdict(states[name], states["reference"],
                           FINAL) != equivalence.DIFFER, name
  wrong = dataclasses.replace(config, learning_rate=config.learning_rate * 2)
  assert helpers.verdict(_train("jit", wrong, data, 8), states["reference"],
                         FINAL) == equivalence.DIFFER
