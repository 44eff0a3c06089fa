"""Where a jit port places its collectives as the shard_map port does.

fsdp's jit port gathers each split parameter once and all-to-alls nothing.
The members-stacked jit steps (ensemble, ensemble_data) with the CNN's
hidden convolution batch-grouped (`shardport.workloads.member_conv`) gather
nothing: the partitioner splits it over the member axis. Each moves at
most 1.1x shard_map's collective bytes a step (issue 32's bound). The same
steps before the fix, kept as variants, fail the check: the negative
controls. And the batch-grouped steps' forward pass is the per-member
program's, bitwise, so they cannot take another ReLU branch than pmap (the
einsum's, which rounds otherwise, is the negative control), also with
several members a device (a device's members vmapped at once is the
negative control). Structure only:
speed is measured by `python -m compare` and bench/runners/jit_ports.py.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare._src.measure import hlo
from shardport.workloads import batches
from shardport.workloads import cnn
from shardport.workloads import configs
from shardport.workloads import ensemble
from shardport.workloads import member_conv
from sharded import data_parallel as port_data_parallel
from sharded import ensemble as port_ensemble
from sharded import ensemble_data as port_ensemble_data
from sharded import fsdp as port_fsdp

SHAPE = (8, 8, 1)
# name -> (module, (before the fix, after), config)
PORTS = {
    "ensemble": (port_ensemble, ("jit_grouped_conv", "jit_member_conv"),
                 configs.EnsembleConfig(members=8, global_batch=64,
                                        input_shape=SHAPE)),
    "ensemble_data": (port_ensemble_data, ("jit", "jit_member_conv"),
                      configs.EnsembleDataConfig(members=2, global_batch=64,
                                                 input_shape=SHAPE)),
    "fsdp": (port_fsdp, ("jit_unconstrained", "jit"),
             configs.TrainConfig(global_batch=64, input_shape=SHAPE)),
}
DATA_PARALLEL = (port_data_parallel, ("jit_plain", "jit"),
                 configs.TrainConfig(global_batch=64, input_shape=SHAPE))


def _step(name, variant, digits, n_devices=8):
  module, _, config = {**PORTS, "data_parallel": DATA_PARALLEL}[name]
  placement = module.make_placement(n_devices)
  state = module.create_state(0, config, placement)
  batch = module.put_batch(next(batches.train_batches(
      digits, 0, config.global_batch, 1)), placement)
  return module.make_train_step(config, placement, variant), state, batch


def _executed(name, variant, digits):
  step, state, batch = _step(name, variant, digits)
  return hlo.executed(step.lower(state, batch).compile().as_text())


def _placed_like_shard_map(name, variant, digits):
  """Why `variant` places its collectives otherwise than shard_map, or ''."""
  port = _executed(name, variant, digits)
  shard_map = _executed(name, "shard_map", digits)
  ratio = (sum(port.collective_bytes.values()) /
           sum(shard_map.collective_bytes.values()))
  if ratio > 1.1:
    return f"{ratio:.2f}x shard_map's collective bytes"
  if port.collectives["all-to-all"]:
    return "an all-to-all"
  if port.collectives["all-gather"] > shard_map.collectives["all-gather"]:
    return (f"{port.collectives['all-gather']} all-gathers against "
            f"{shard_map.collectives['all-gather']}")
  return ""


@pytest.mark.parametrize("name", sorted(PORTS))
def test_the_fixed_jit_step_places_its_collectives_as_shard_map(name,
                                                                 digits):
  after = PORTS[name][1][1]
  assert _placed_like_shard_map(name, after, digits) == ""


@pytest.mark.parametrize("name", sorted(PORTS))
def test_the_jit_step_before_its_fix_fails_the_check(name, digits):
  before = PORTS[name][1][0]
  assert _placed_like_shard_map(name, before, digits) != ""


def _transposes(variant, digits):
  step, state, batch = _step("data_parallel", variant, digits)
  return step.lower(state, batch).compile().as_text().count(" transpose(")


def test_the_data_parallel_jit_step_reduces_after_the_transposes(digits):
  # Its collectives are shard_map's either way; without the `reduced` cast
  # the partitioner reduces each matmul kernel's gradient before autodiff's
  # transpose of it, which XLA:CPU then does in the update (0.88x).
  shard_map = _transposes("shard_map", digits)
  assert _placed_like_shard_map("data_parallel", "jit", digits) == ""
  assert _transposes("jit", digits) == shard_map
  # Negative control: the plain jit step transposes the reduced gradients.
  assert _transposes("jit_plain", digits) > shard_map


def test_the_reduced_cast_changes_no_number(digits):
  def state_after_3_steps(variant):
    step, state, _ = _step("data_parallel", variant, digits)
    placement = port_data_parallel.make_placement(8)
    for batch in batches.train_batches(digits, 0, 64, 3):
      state, _ = step(state, port_data_parallel.put_batch(batch, placement))
    return jax.tree.leaves(jax.device_get(state))

  cast = state_after_3_steps("jit")
  for leaf, plain in zip(cast, state_after_3_steps("jit_plain")):
    np.testing.assert_array_equal(leaf, plain)
  # Negative control: shard_map's step sums in another order.
  assert not all(np.array_equal(leaf, other) for leaf, other in
                 zip(cast, state_after_3_steps("shard_map")))


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 0), (0, 2))])
def test_shifted_window_conv_is_the_convolution_to_rounding(padding):
  rng = np.random.default_rng(0)
  lhs = rng.normal(size=(4, 9, 7, 3)).astype(np.float32)
  rhs = rng.normal(size=(3, 3, 3, 5)).astype(np.float32)
  expected = jax.lax.conv_general_dilated(
      lhs, rhs, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))
  got = cnn.shifted_window_conv(lhs, rhs, (1, 1), padding)
  assert got.shape == expected.shape
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  # Negative control: the kernel flipped is another convolution.
  assert not np.allclose(
      cnn.shifted_window_conv(lhs, rhs[::-1], (1, 1), padding), expected,
      atol=1e-3)
  with pytest.raises(ValueError, match="stride 1"):
    cnn.shifted_window_conv(lhs, rhs, (2, 2), padding)


def test_the_cnn_with_shifted_window_convs_takes_the_same_params():
  images = jnp.asarray(np.random.default_rng(1).normal(
      size=(2, *SHAPE)).astype(np.float32))
  params = cnn.CNN().init(jax.random.key(0), images)
  stackable = cnn.CNN(hidden_conv=cnn.shifted_window_conv)
  assert (jax.tree.structure(stackable.init(jax.random.key(0), images)) ==
          jax.tree.structure(params))
  np.testing.assert_allclose(stackable.apply(params, images),
                             cnn.CNN().apply(params, images),
                             rtol=1e-5, atol=1e-5)
  assert isinstance(stackable, nn.Module)


def _member_loss(name, variant, digits, n_devices=8):
  step, state, batch = _step(name, variant, digits, n_devices)
  return np.asarray(step(state, batch)[1]["member_loss"])


@pytest.mark.parametrize("name", ["ensemble", "ensemble_data"])
def test_the_batch_grouped_step_rounds_the_forward_pass_as_shard_map(
    name, digits):
  shard_map = _member_loss(name, "shard_map", digits)
  np.testing.assert_array_equal(
      _member_loss(name, "jit_member_conv", digits), shard_map)
  # Negative control: the einsum's forward pass rounds otherwise.
  assert not np.array_equal(_member_loss(name, "jit_einsum_conv", digits),
                            shard_map)


# Four members a device (2 devices); all eight on one ran as well, and
# took the same path at twice the compile time.
@pytest.mark.parametrize("n_devices", [2])
def test_with_several_members_a_device_each_runs_one_member_at_a_time(
    n_devices, digits):
  shard_map = _member_loss("ensemble", "shard_map", digits, n_devices)
  np.testing.assert_array_equal(
      _member_loss("ensemble", "jit_member_conv", digits, n_devices),
      shard_map)
  # Negative control: all of a device's members vmapped at once.
  _, state, batch = _step("ensemble", "shard_map", digits, n_devices)
  at_once = jax.jit(lambda s, b: ensemble.stacked_train_step(s, b, "member"))
  assert not np.array_equal(
      np.asarray(at_once(state, batch)[1]["member_loss"]), shard_map)


def _members_conv(conv, lhs, rhs):
  """Every member's `(sum of out**2, its gradients)`, vmapped."""
  def loss(lhs, rhs):
    return jnp.sum(conv(lhs, rhs) ** 2)
  return jax.jit(jax.vmap(jax.value_and_grad(loss, argnums=(0, 1))))(lhs, rhs)


@pytest.mark.parametrize("padding", ["SAME", "VALID", ((1, 0), (0, 2))])
@pytest.mark.parametrize("batch_shards", [1, 2])
def test_member_conv_vmapped_is_each_members_convolution(padding,
                                                         batch_shards):
  rng = np.random.default_rng(0)
  lhs = rng.normal(size=(3, 4, 9, 7, 2)).astype(np.float32)
  rhs = rng.normal(size=(3, 3, 3, 2, 5)).astype(np.float32)

  def lax_conv(lhs, rhs):
    return jax.lax.conv_general_dilated(
        lhs, rhs, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))

  def members_conv(lhs, rhs):
    return member_conv.conv(lhs, rhs, (1, 1), padding,
                            batch_shards=batch_shards)

  expected = _members_conv(lax_conv, lhs, rhs)
  got = _members_conv(members_conv, lhs, rhs)
  # On one device XLA sums the batch-grouped convolution in another order:
  # within 1e-5 of each leaf's largest value.
  for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
    np.testing.assert_allclose(g, e, atol=1e-5 * np.abs(e).max())
  # Negative control: each member with its neighbour's kernel.
  swapped = _members_conv(members_conv, lhs, np.roll(rhs, 1, axis=0))
  assert not np.allclose(swapped[0], expected[0], rtol=1e-3)


def test_member_conv_refuses_what_it_does_not_compute():
  lhs = np.zeros((2, 6, 6, 2), np.float32)
  rhs = np.zeros((3, 3, 2, 4), np.float32)
  with pytest.raises(ValueError, match="stride-1"):
    member_conv.conv(lhs, rhs, (2, 2), "SAME")
  with pytest.raises(ValueError, match="ungrouped"):
    member_conv.conv(lhs, rhs, (1, 1), "SAME", feature_group_count=2)
  with pytest.raises(ValueError, match="precision"):
    member_conv.conv(lhs, rhs, (1, 1), "SAME",
                     precision=jax.lax.Precision.HIGHEST)
