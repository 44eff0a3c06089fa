"""Gradient accumulation: pmap ≡ shard_map ≡ jit ≡ the full-batch reference.

One optimiser step from the same initial state on the same global batch, on
1, 2 and 8 of the emulated devices with K = 1, 2 and 4 microbatches. Every
equivalence check has a negative control that perturbs one input and
asserts the check fails.
"""

import dataclasses
import functools
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare.reference import accumulation as reference
from compare.strategies import accumulation
from compare import runner
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
# of B/(nK) examples, then means, against one sum of B): float32 rounding of
# such sums is ~1e-7 of the summed magnitude. Measured over this file's runs
# (every K, device count, loop, both workloads): at most 7.7e-7 of a leaf's
# max|x|, i.e. ~1e-8 abs on the weights, as JAX-FACTS says. The atol is
# scaled to each leaf's magnitude because near-zero entries have large,
# meaningless relative errors. 1e-5 is 13x above the measured error and
# 10^4 below the effect of one changed label in 64 (0.16-0.56 of max|x| in
# some leaf) or of a K-times gradient (`test_wrong_normalisation_is_caught`).
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
def _host_batch(workload="cnn", batch=BATCH):
  data = datasets.load("linear512" if workload == "linear512" else "digits")
  return next(batches.train_batches(data, 0, batch, 1))


def _perturbed(batch):
  """The batch with one example's label changed."""
  targets = batch["targets"].copy()
  targets[0] = (targets[0] + 1) % 10 if targets.dtype.kind == "i" else (
      1.0 - targets[0])
  return {**batch, "targets": targets}


@functools.cache
def _compiled(run, n_devices, config):
  """`(module, placement, state, step, compiled)`, once per configuration.

  The ahead-of-time executable serves both the runs and the HLO and memory
  checks, so that every configuration compiles exactly once. It takes only
  states of the same pytree structure, and each `create_state` builds a new
  optax transformation (a static field of the state): runs copy `state`.
  """
  module = MODULES[run]
  placement = module.make_placement(n_devices)
  step = module.make_train_step(config, placement, run.removeprefix("dp_"))
  state = module.create_state(config.seed, config, placement)
  batch = module.put_batch(_host_batch(config.workload, config.global_batch),
                           placement)
  compiled = step.lower(state, batch).compile()
  accumulates = isinstance(config, configs.AccumulationConfig)
  calls = (microbatches.calls_per_step(config)
           if accumulates and run != "reference" else 1)
  return module, placement, state, step, compiled, runner.optimizer_step(
      compiled, calls)


def _resolved(run, config):
  """`config` as `run` reads it, so that equal programs share a compile."""
  if not isinstance(config, configs.AccumulationConfig):
    return config
  if run == "reference":  # the reference ignores K and the loop
    return dataclasses.replace(config, accum_steps=1, accum_loop="auto")
  return dataclasses.replace(config, accum_loop=accumulation.resolve_loop(
      config.accum_loop, jax.devices()[0].platform))


def _one_step(run, n_devices, config, batch=None):
  """`to_host` of the state after one step, and the step's loss."""
  module, placement, state, _, _, whole_step = _compiled(
      run, n_devices, _resolved(run, config))
  state = jax.tree.map(jnp.copy, state)  # the step donates its input
  if batch is None:
    batch = _host_batch(config.workload, config.global_batch)
  state, metrics = whole_step(state, module.put_batch(batch, placement))
  return module.to_host(state), module.metrics_to_host(metrics)["loss"]


def _lowered(run, n_devices, config):
  return _compiled(run, n_devices, _resolved(run, config))[4]


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
  # jit on 8 devices and K in {1, 4} only, to keep the file fast: its
  # placement of the collective is what differs, shown best by the extremes.
  with_jit = n_devices == 8 and k != 2
  for run in ("pmap", "shard_map", "jit")[:3 if with_jit else 2]:
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


@pytest.mark.parametrize("run", ["pmap", "shard_map", "jit"])
def test_one_microbatch_is_the_data_parallel_step(run, n_devices=8):
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
  config = _config(4, loop)
  expected, _ = _one_step("reference", 2, config)
  # The loop is shared code; pmap runs it too under multisteps (whose
  # optimiser state the backends wrap and unwrap) and under scan (whose
  # HLO `test_one_all_reduce_per_step` reads).
  for run in ("pmap", "shard_map") if loop in ("multisteps", "scan") else (
      "shard_map",):
    assert_close(_one_step(run, 2, config)[0], expected)


def test_wrong_normalisation_is_caught(monkeypatch):
  # Summing the K microbatch gradients instead of averaging them: the error
  # that mean-of-means semantics exists to avoid.
  config = _config(2)
  expected, _ = _one_step("reference", 2, config)
  mean_grads = microbatches.mean_grads
  monkeypatch.setattr(
      microbatches, "mean_grads",
      lambda *args: jax.tree.map(lambda x: 2 * x, mean_grads(*args)))
  placement = sharded.make_placement(2)
  config = _resolved("shard_map", config)
  step = sharded.make_train_step(config, placement, "shard_map")  # uncached
  state = sharded.create_state(config.seed, config, placement)
  state, _ = step(state, sharded.put_batch(_host_batch(), placement))
  with pytest.raises(AssertionError):
    assert_close(sharded.to_host(state), expected)


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


@pytest.mark.parametrize("run", ["shard_map", "pmap"])
@pytest.mark.parametrize("k,loop", [(1, "auto"), (2, "auto"), (4, "auto"),
                                    (4, "scan")])
def test_one_all_reduce_per_step(run, k, loop):
  counts = _all_reduces_by_computation(
      _lowered(run, 8 if loop == "auto" else 2, _config(k, loop)).as_text())
  # One all-reduce (the gradients and the loss, combined), in the entry
  # computation: not in a while body (scan), where it would run per trip.
  assert list(counts.values()) == [1], counts
  assert next(iter(counts)) == "ENTRY", counts


# Temp memory of K=4 over the full batch, at most. One device and 256
# examples, so that activations, not the param-sized buffers (gradients, the
# accumulator), dominate. The rolled loop holds one microbatch's activations
# (measured ~0.3, multisteps alike); the unrolled CPU default is scheduled
# with the K forward passes side by side and saves less (measured ~0.7,
# docs/accumulation-notes.md).
# The unrolled saving is XLA 0.10's scheduling: jaxlib 0.9.2 runs the K
# unrolled passes with no temp saving at all (measured 0.999), hence jax010.
_TEMP_RATIO = {"auto": 0.8, "scan": 0.5}


@pytest.mark.parametrize("loop", [
    pytest.param("auto", marks=pytest.mark.jax010), "scan"])
def test_microbatches_use_less_temp_memory(loop):
  config = _config(4, loop, batch=256)
  full = _lowered("reference", 1, config).memory_analysis()
  accumulated = _lowered("shard_map", 1, config).memory_analysis()
  ratio = accumulated.temp_size_in_bytes / full.temp_size_in_bytes
  assert ratio < _TEMP_RATIO[loop], ratio
  # Donation: the state's buffers are reused for the new state.
  assert accumulated.alias_size_in_bytes > 0


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
