"""Gradient accumulation: pmap ≡ shard_map ≡ jit ≡ the full-batch reference.

One optimiser step from the same initial state on the same global batch, on
1, 2 and 8 of the emulated devices with K = 1, 2 and 4 microbatches. Every
equivalence check has a negative control that perturbs one input and
asserts the check fails.
"""

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare._src.measure import hlo
from shardport import strategies
from shardport.strategies import accumulation
from tests import helpers
from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import datasets
from shardport.workloads import microbatches

BATCH = 64  # divisible by 8 devices x 4 microbatches, and small: fast steps
STRATEGY = strategies.get("accumulation")
# The strategy's runs, plus every data-parallel port as `dp_<name>` (the
# strategy compares against the pmap and shard_map ones; jit is added here).
RUNS = {**{f"dp_{run.name}": run for run in
           strategies.get("data_parallel").runs if run.name != "reference"},
        **{run.name: run for run in STRATEGY.runs}}
# The runs that accumulate: pmap, shard_map and jit.
PORTS = tuple(run.name for run in STRATEGY.runs if run.name != "reference"
              and run.module.__name__.endswith("." + STRATEGY.program))
sharded = RUNS["shard_map"].module
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
TOL = helpers.leaf_scaled(ATOL)


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
  module, variant = RUNS[run].module, RUNS[run].variant
  placement = module.make_placement(n_devices)
  step = module.make_train_step(config, placement, variant)
  state = module.create_state(config.seed, config, placement)
  batch = module.put_batch(_host_batch(config.workload, config.global_batch),
                           placement)
  compiled = step.lower(state, batch).compile()
  return (module, placement, state, compiled,
          STRATEGY.calls_per_step(config, run))


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
  module, placement, state, compiled, calls = _compiled(
      run, n_devices, _resolved(run, config))
  state = jax.tree.map(jnp.copy, state)  # the step donates its input
  if batch is None:
    batch = _host_batch(config.workload, config.global_batch)
  done = helpers.drive(module, placement, state, compiled, [batch], calls)
  return done.host, done.metrics[0]["loss"]


def _lowered(run, n_devices, config):
  return _compiled(run, n_devices, _resolved(run, config))[3]


# No accumulation and k microbatches, on 1, 2 and 8 devices: each k and
# each device count once, and k = 4 on 8 (CI's original runtime runs it).
@pytest.mark.parametrize("k, n_devices", [(1, 1), (2, 2), (1, 8), (4, 8)])
def test_ports_match_reference(n_devices, k):
  config = _config(k)
  expected, expected_loss = _one_step("reference", n_devices, config)
  # jit on 8 devices and K in {1, 4} only, to keep the file fast: its
  # placement of the collective is what differs, shown best by the extremes.
  with_jit = n_devices == 8 and k != 2
  for run in PORTS[:3 if with_jit else 2]:
    actual, loss = _one_step(run, n_devices, config)
    helpers.assert_close(actual, expected, TOL)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
  # pmap and shard_map(check_vma=False) run the same per-device program.
  helpers.assert_bitwise(_one_step("pmap", n_devices, config),
                         _one_step("shard_map", n_devices, config))


@pytest.mark.parametrize("run", PORTS)
def test_reference_check_fails_on_one_changed_label(run):
  config = _config(4)
  expected, _ = _one_step("reference", 8, config)
  actual, _ = _one_step(run, 8, config, _perturbed(_host_batch()))
  with pytest.raises(AssertionError):
    helpers.assert_close(actual, expected, TOL)


def test_pmap_shard_map_check_fails_on_one_changed_label():
  config = _config(4)
  with pytest.raises(AssertionError):
    helpers.assert_bitwise(
        _one_step("pmap", 8, config),
        _one_step("shard_map", 8, config, _perturbed(_host_batch())))


@pytest.mark.parametrize("run", PORTS)
def test_one_microbatch_is_the_data_parallel_step(run, n_devices=8):
  dp_config = configs.TrainConfig(global_batch=BATCH)
  expected = _one_step(f"dp_{run}", n_devices, dp_config)
  helpers.assert_bitwise(_one_step(run, n_devices, _config(1)), expected)
  with pytest.raises(AssertionError):
    helpers.assert_bitwise(
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
    helpers.assert_close(_one_step(run, 2, config)[0], expected, TOL)


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
  done = helpers.drive(sharded, placement, state, step, [_host_batch()])
  with pytest.raises(AssertionError):
    helpers.assert_close(done.host, expected, TOL)


def test_linear512_matches_reference():
  # Adam's first update is ~lr * sign(g) whatever the gradient's scale, so
  # the params alone would hide a normalisation error: the moments in
  # opt_state carry the gradient itself and are compared too.
  config = _config(4, workload="linear512")
  expected, _ = _one_step("reference", 8, config)
  for run in PORTS:
    helpers.assert_close(_one_step(run, 8, config)[0], expected, TOL)
  perturbed = _perturbed(_host_batch("linear512"))
  with pytest.raises(AssertionError):
    helpers.assert_close(_one_step("shard_map", 8, config, perturbed)[0],
                         expected, TOL)


def _one_all_reduce_of_grads_and_loss(compiled, params):
  """Asserts what the step all-reduces: once, the gradients and the loss.

  The count alone cannot tell a step that lost its gradient pmean (the loss
  pmean still makes one all-reduce): the bytes can. One step all-reduces one
  gradient per parameter (f32, the params' size) and the f32 loss.
  """
  counts = hlo.collectives_by_computation(compiled.as_text())
  # One all-reduce, in the entry computation: not in a while body (scan),
  # where it would run per trip.
  assert counts == {hlo.ENTRY: 1}, counts
  params_bytes = sum(np.asarray(x).nbytes for x in jax.tree.leaves(params))
  assert hlo.describe(compiled)["all_reduce_bytes"] == params_bytes + 4


@pytest.mark.parametrize("run", ["shard_map", "pmap"])
@pytest.mark.parametrize("k,loop", [(1, "auto"), (2, "auto"), (4, "auto"),
                                    (4, "scan")])
def test_one_all_reduce_per_step(run, k, loop):
  n_devices = 8 if loop == "auto" else 2
  config = _resolved(run, _config(k, loop))
  module, _, state, compiled, _ = _compiled(run, n_devices, config)
  _one_all_reduce_of_grads_and_loss(compiled, module.to_host(state)["params"])


class _LossOnlyPmean:
  """`jax.lax` as a port sees it, with the gradients' pmean dropped.

  `lax.pmean` of a pytree of gradients returns them unreduced; the scalar
  loss is still averaged, so the step keeps exactly one all-reduce.
  """

  def __getattr__(self, name):
    return getattr(jax.lax, name)

  @staticmethod
  def pmean(x, axis_name, **kwargs):
    if jax.tree_util.treedef_is_leaf(jax.tree.structure(x)):  # the loss
      return jax.lax.pmean(x, axis_name, **kwargs)
    return x  # the gradients, one per parameter


def test_a_lost_gradient_pmean_is_caught_by_the_bytes(monkeypatch):
  config = _resolved("shard_map", _config(4))
  module, placement, state, _, _ = _compiled("shard_map", 8, config)
  monkeypatch.setattr(sharded, "lax", _LossOnlyPmean())
  step = module.make_train_step(config, placement, "shard_map")  # uncached
  batch = module.put_batch(_host_batch(), placement)
  compiled = step.lower(state, batch).compile()
  # The count is still one: the loss's pmean.
  assert hlo.collectives_by_computation(compiled.as_text()) == {hlo.ENTRY: 1}
  assert hlo.describe(compiled)["all_reduce_bytes"] == 4
  with pytest.raises(AssertionError):
    _one_all_reduce_of_grads_and_loss(compiled,
                                      module.to_host(state)["params"])


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


@pytest.mark.parametrize("module", [RUNS["pmap"].module, sharded],
                         ids=["pmap", "shard_map"])
def test_indivisible_batch_names_the_three_numbers(module):
  config = _config(4, batch=60)
  with pytest.raises(batches.MicrobatchError) as error:
    module.make_train_step(config, module.make_placement(8),
                           module.VARIANTS[0])
  message = str(error.value)
  assert "\n" not in message
  for number in ("60", "8", "4"):
    assert re.search(rf"\b{number}\b", message), message
