"""Gradient accumulation: pmap ≡ shard_map ≡ jit ≡ the full-batch reference.

One optimiser step from the same initial state on the same global batch, on
1, 2 and 8 of the emulated devices with K = 1, 2 and 4 microbatches. Every
equivalence check has a negative control that perturbs one input and
asserts the check fails.
"""

import functools
import re

import chex
import jax
import numpy as np
import pytest

from compare.reference import accumulation as reference
from legacy_pmap import accumulation as legacy
from legacy_pmap import data_parallel as legacy_dp
from sharded import accumulation as sharded
from sharded import data_parallel as sharded_dp
from workloads import batches
from workloads import configs
from workloads import datasets
from workloads import microbatches

BATCH = 64  # divisible by 8 devices x 4 microbatches, and small: fast steps
MODULES = {"pmap": legacy, "shard_map": sharded, "jit": sharded,
           "reference": reference, "dp_pmap": legacy_dp,
           "dp_shard_map": sharded_dp, "dp_jit": sharded_dp}
# After one step the runs differ only in summation order (K microbatch sums
# of B/(nK) examples, then a mean, against one sum of B): float32 rounding of
# such sums is ~1e-7 of the summed magnitude, and the largest error measured
# over this file's runs is ~1e-6 of a leaf's max|x| (JAX-FACTS: ~1e-8 abs on
# weights ~1e-2). The atol is scaled to each leaf's magnitude because near-
# zero entries have large, meaningless relative errors. 1e-5 is 10x above
# the measured error and 100x below the effect of one changed label in 64
# (~1e-2 of the gradient) or of a K-times gradient (the normalisation error
# in `test_wrong_normalisation_is_caught`).
ATOL = 1e-5


def _config(k=4, loop="auto", workload="cnn", batch=BATCH):
  if workload == "linear512":
    return configs.AccumulationConfig(
        workload="linear512", dataset="linear512", input_shape=(512,),
        global_batch=batch, learning_rate=1e-3, momentum=0.0,
        accum_steps=k, accum_loop=loop)
  return configs.AccumulationConfig(global_batch=batch, accum_steps=k,
                                    accum_loop=loop)


@functools.cache
def _host_batch(workload="cnn"):
  data = datasets.load("linear512" if workload == "linear512" else "digits")
  return next(batches.train_batches(data, 0, BATCH, 1))


def _perturbed(batch):
  """The batch with one example's label changed."""
  targets = batch["targets"].copy()
  targets[0] = (targets[0] + 1) % 10 if targets.dtype.kind == "i" else (
      1.0 - targets[0])
  return {**batch, "targets": targets}


@functools.cache
def _compiled(run, n_devices, config):
  """The placement and train step of `run`, built once per configuration."""
  module = MODULES[run]
  placement = module.make_placement(n_devices)
  variant = run.removeprefix("dp_")
  return placement, module.make_train_step(config, placement, variant)


def _one_step(run, n_devices, config, batch=None):
  """`to_host` of the state after one step, and the step's loss."""
  module = MODULES[run]
  placement, step = _compiled(run, n_devices, config)
  state = module.create_state(config.seed, config, placement)
  batch = _host_batch(config.workload) if batch is None else batch
  state, metrics = step(state, module.put_batch(batch, placement))
  return module.to_host(state), module.metrics_to_host(metrics)["loss"]


def _lowered(run, n_devices, config):
  module = MODULES[run]
  placement, step = _compiled(run, n_devices, config)
  state = module.create_state(config.seed, config, placement)
  batch = module.put_batch(_host_batch(config.workload), placement)
  return step.lower(state, batch).compile()


def assert_close(actual, expected, atol=ATOL):
  """Every leaf within `atol * max|expected leaf|` of the expected one."""
  chex.assert_trees_all_equal_shapes_and_dtypes(actual, expected)

  def check(path, a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    bound = atol * max(np.max(np.abs(b), initial=0.0), 1e-30)
    error = np.max(np.abs(a - b), initial=0.0)
    assert error <= bound, (f"{jax.tree_util.keystr(path)}: max abs error "
                            f"{error:.3g} > {bound:.3g}")

  jax.tree_util.tree_map_with_path(check, actual, expected)


@pytest.mark.parametrize("n_devices", [1, 2, 8])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_ports_match_reference(n_devices, k):
  config = _config(k)
  expected, expected_loss = _one_step("reference", n_devices, config)
  for run in ("pmap", "shard_map", "jit"):
    actual, loss = _one_step(run, n_devices, config)
    assert_close(actual, expected)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
  # pmap and shard_map(check_vma=False) run the same per-device program.
  chex.assert_trees_all_equal(_one_step("pmap", n_devices, config),
                              _one_step("shard_map", n_devices, config))


@pytest.mark.parametrize("run", ["pmap", "shard_map", "jit"])
def test_reference_check_fails_on_one_changed_label(run):
  config = _config(4)
  expected, _ = _one_step("reference", 8, config)
  actual, _ = _one_step(run, 8, config, _perturbed(_host_batch()))
  with pytest.raises(AssertionError):
    assert_close(actual, expected)


def test_pmap_shard_map_check_fails_on_one_changed_label():
  config = _config(4)
  with pytest.raises(AssertionError):
    chex.assert_trees_all_equal(
        _one_step("pmap", 8, config),
        _one_step("shard_map", 8, config, _perturbed(_host_batch())))


@pytest.mark.parametrize("n_devices", [1, 2, 8])
@pytest.mark.parametrize("run", ["pmap", "shard_map", "jit"])
def test_one_microbatch_is_the_data_parallel_step(run, n_devices):
  dp_config = configs.TrainConfig(global_batch=BATCH)
  expected = _one_step(f"dp_{run}", n_devices, dp_config)
  chex.assert_trees_all_equal(_one_step(run, n_devices, _config(1)),
                              expected)
  with pytest.raises(AssertionError):
    chex.assert_trees_all_equal(
        _one_step(run, n_devices, _config(1), _perturbed(_host_batch())),
        expected)


@pytest.mark.parametrize("loop", microbatches.LOOPS)
def test_every_loop_matches_reference(loop):
  config = _config(2, loop)
  expected, _ = _one_step("reference", 2, config)
  for run in ("pmap", "shard_map"):
    assert_close(_one_step(run, 2, config)[0], expected)


def test_wrong_normalisation_is_caught(monkeypatch):
  # Summing the K microbatch gradients instead of averaging them: the error
  # that mean-of-means semantics exists to avoid.
  mean_grads = microbatches.mean_grads
  monkeypatch.setattr(
      microbatches, "mean_grads",
      lambda *args: jax.tree.map(lambda x: 2 * x, mean_grads(*args)))
  config = _config(2, batch=BATCH + 2 * 4)  # a fresh compile, not the cache
  placement = sharded.make_placement(2)
  step = sharded.make_train_step(config, placement, "shard_map")
  state = sharded.create_state(0, config, placement)
  data = datasets.load("digits")
  batch = next(batches.train_batches(data, 0, config.global_batch, 1))
  actual = sharded.to_host(step(state, sharded.put_batch(batch, placement))[0])
  expected, _ = _one_step("reference", 2, config, batch)
  with pytest.raises(AssertionError):
    assert_close(actual, expected)


def test_linear512_matches_reference():
  # Adam's first update is ~lr * sign(g) whatever the gradient's scale, so
  # the params alone would hide a normalisation error: the moments in
  # opt_state carry the gradient itself and are compared too.
  config = _config(4, workload="linear512")
  expected, _ = _one_step("reference", 8, config)
  for run in ("pmap", "shard_map", "jit"):
    assert_close(_one_step(run, 8, config)[0], expected)
  perturbed = _perturbed(_host_batch("linear512"))
  with pytest.raises(AssertionError):
    assert_close(_one_step("shard_map", 8, config, perturbed)[0], expected)


def _all_reduces_by_computation(hlo_text):
  counts = {}
  for computation in re.split(r"\n(?=\S)", hlo_text):
    n = len(re.findall(r"\sall-reduce(?:-start)?\(", computation))
    if n:
      counts[computation.split(" ", 2)[0]] = n
  return counts


@pytest.mark.parametrize("loop", ["auto", "scan"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_shard_map_reduces_once_per_step(k, loop):
  for run in ("shard_map", "pmap"):
    counts = _all_reduces_by_computation(
        _lowered(run, 8, _config(k, loop)).as_text())
    # One all-reduce (the gradients and the loss, combined), in the entry
    # computation: not in a while body, where it would run K times.
    assert list(counts.values()) == [1], counts
    assert next(iter(counts)) == "ENTRY", counts


@pytest.mark.parametrize("loop", ["scan", "multisteps"])
def test_microbatches_use_less_temp_memory(loop):
  full = _lowered("dp_shard_map", 2, configs.TrainConfig(
      global_batch=BATCH)).memory_analysis().temp_size_in_bytes
  accumulated = _lowered("shard_map", 2, _config(4, loop)
                        ).memory_analysis().temp_size_in_bytes
  assert accumulated < 0.75 * full, (accumulated, full)


@pytest.mark.parametrize("module", [legacy, sharded])
def test_indivisible_batch_names_the_three_numbers(module):
  config = _config(4, batch=60)
  with pytest.raises(batches.MicrobatchError) as error:
    module.make_train_step(config, module.make_placement(8),
                           module.VARIANTS[0])
  message = str(error.value)
  assert isinstance(error.value, ValueError)
  assert "\n" not in message
  for number in ("60", "8", "4"):
    assert re.search(rf"\b{number}\b", message), message


def test_both_backends_expose_the_same_api():
  for name in ("VARIANTS", "make_placement", "create_state", "put_batch",
               "make_train_step", "make_evaluate", "to_host",
               "metrics_to_host"):
    for module in (legacy, sharded, reference):
      assert hasattr(module, name), (module.__name__, name)
