"""Ensemble: pmap, the shard_map port and the reference agree member by member.

Runs are short (3 steps of 32 examples) and cached per configuration, so the
file stays well under a minute on two cores; the long run is the CLI's.
"""

import dataclasses

import chex
import jax
import numpy as np
import optax
import pytest

from shardport import strategies
from shardport.strategies.tolerances import Tolerance
from tests import helpers
from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import ensemble

STRATEGY = strategies.get("ensemble")
RUNS = {run.name: run for run in STRATEGY.runs}
legacy, port = RUNS["pmap"].module, RUNS["shard_map"].module
reference = RUNS["reference"].module
CONFIG = configs.EnsembleConfig(members=8, global_batch=32, steps=3,
                                input_shape=(8, 8, 1))

# Every member runs the same single-model program on every backend, so the
# states agree bitwise here (measured: no difference after 55 steps of the
# default CLI run, on 1, 2, 4 and 8 devices, with 1 and 2 members per device).
# The tolerance, relative to each leaf's largest magnitude, only admits an
# XLA build that rounds a reduction another way: ~1 ulp (1e-7) per step,
# which three steps cannot grow past 1e-6. A 1% learning-rate change, or one
# member started from another key, moves some leaf by more than 1e-3 of its
# magnitude (the negative controls below check that the same check fails).
TOLERANCE = helpers.leaf_scaled(1e-5)
# The ensemble's probabilities are a mean over members: an all-reduce on the
# backends, a stacked mean on the reference, summed in another order
# (measured 2.4e-7 at most; probabilities are at most 1).
PROBS_ATOL = 1e-6

_RUNS = {}
_MEMBER_KEYS = ensemble.member_keys  # the real one, for the patched ones


def _runs(specs, data):
  """Runs for `(run name, n_devices, config)` specs, each made once.

  Each is `helpers.run` with the host state after the init and every step.
  Compiling dominates these short runs (the CNN's init alone takes seconds
  on XLA:CPU), so tests share runs wherever they can.
  """
  for spec in specs:
    if spec not in _RUNS:
      name, n_devices, config = spec
      _RUNS[spec] = helpers.run(RUNS[name].module, RUNS[name].variant, config,
                                data, n_devices, keep_states=True)
  return [_RUNS[spec] for spec in specs]


def _cached_run(name, n_devices, config, data):
  return _runs([(name, n_devices, config)], data)[0]


def _assert_members_match(a, b):
  """Raises AssertionError naming the first leaf and member that differ."""
  helpers.assert_close(a, b, TOLERANCE, members=True)


def _assert_distinct_members(params):
  """Raises AssertionError if two members share a kernel (biases start at 0)."""
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    if "kernel" not in jax.tree_util.keystr(path):
      continue
    flat = np.asarray(leaf).reshape(len(leaf), -1)
    for i in range(len(flat)):
      for j in range(i):
        if np.array_equal(flat[i], flat[j]):
          raise AssertionError(f"members {j} and {i} share "
                               f"{jax.tree_util.keystr(path)}")


def _shared_key(seed, members):
  """Every member gets the first member's key: the bug the tests must catch."""
  return _MEMBER_KEYS(seed, 1)[np.zeros(members, np.int32)]


def test_member_keys_do_not_depend_on_the_ensemble_size():
  # split(key, n) is a prefix of split(key, 8) under jax's (default)
  # partitionable threefry: member i of a smaller ensemble is member i of
  # the 8-member reference, which the sub-mesh tests below rely on.
  np.testing.assert_array_equal(
      jax.random.key_data(ensemble.member_keys(0, 8))[:2],
      jax.random.key_data(ensemble.member_keys(0, 2)))


# One member per device. (Several a device, the path a device count below
# the members takes: test_port_matches_reference_with_two_members_per_device
# here, four a device in tests/test_jit_ports.py; all eight on one device
# ran here too, CI time.)
@pytest.mark.parametrize("n_devices", [8])
def test_backends_agree_per_member(digits, n_devices):
  config = dataclasses.replace(CONFIG, members=n_devices)
  pmap, shard_map, truth = _runs([("pmap", n_devices, config),
                                  ("shard_map", n_devices, config),
                                  ("reference", 8, CONFIG)], digits)
  runs = {"pmap": pmap.states, "shard_map": shard_map.states,
          # The first n members of the 8-member reference (one fewer compile
          # per device count; see
          # test_member_keys_do_not_depend_on_the_ensemble_size).
          "reference": [jax.tree.map(lambda x: x[:n_devices], state)
                        for state in truth.states]}
  for states in runs.values():
    chex.assert_tree_shape_prefix(states[0], (n_devices,))
  for a, b in [("pmap", "shard_map"), ("pmap", "reference"),
               ("shard_map", "reference")]:
    # Init, then after the first step (tight: catches a wrong loss scale or
    # key before a trajectory can hide it), then after the last.
    for at in (0, 1, -1):
      _assert_members_match(runs[a][at], runs[b][at])


def test_port_matches_reference_with_two_members_per_device(digits):
  config = dataclasses.replace(CONFIG, members=16)
  ported, truth = (run.states for run in _runs(
      [("shard_map", 8, config), ("reference", 8, config)], digits))
  chex.assert_tree_shape_prefix(ported[-1], (16,))
  for at in (0, 1, -1):
    _assert_members_match(ported[at], truth[at])
  _assert_distinct_members(ported[0]["params"])


def test_metrics_agree(digits):
  runs = dict(zip(RUNS, _runs([(name, 8, CONFIG) for name in RUNS], digits)))
  test = batches.test_batch(digits, 1)
  first = next(batches.train_batches(digits, CONFIG.seed, CONFIG.global_batch,
                                     1))
  # Recomputed in numpy from each backend's own states (members' losses,
  # the mean of their probabilities), so that a wrong member order, a
  # reduction over the wrong members or a loss summed where it is averaged
  # fails here even where every backend shares it.
  plain = Tolerance(rtol=1e-5, atol=PROBS_ATOL)
  sums = {name: run.evaluate(CONFIG, test) for name, run in runs.items()}
  for name, run in runs.items():
    start = helpers.ensemble_sums(
        helpers.member_logits(run.states[0]["params"], first["inputs"]),
        first["targets"])
    helpers.assert_close(
        {k: run.metrics[0][k] for k in ("member_loss", "accuracy")},
        {"member_loss": start["member_loss_sum"] / start["count"],
         "accuracy": start["ensemble_correct"] / start["count"]},
        plain, dtypes=False)
    helpers.assert_close(
        sums[name], helpers.ensemble_sums(
            helpers.member_logits(run.host["params"], test["inputs"]),
            test["targets"]), plain, dtypes=False)
  want = sums["reference"]
  for name in ("pmap", "shard_map"):
    for got_step, want_step in zip(runs[name].metrics,
                                   runs["reference"].metrics):
      np.testing.assert_array_equal(got_step["accuracy"],
                                    want_step["accuracy"])
      np.testing.assert_allclose(got_step["member_loss"],
                                 want_step["member_loss"],
                                 rtol=TOLERANCE.atol)
    got = sums[name]
    for field in ("member_correct", "ensemble_correct", "count"):
      np.testing.assert_array_equal(got[field], want[field], field)
    np.testing.assert_allclose(got["member_loss_sum"], want["member_loss_sum"],
                               rtol=TOLERANCE.atol)
    np.testing.assert_allclose(got["ensemble_probs"], want["ensemble_probs"],
                               atol=PROBS_ATOL)


def test_members_start_from_different_keys(digits):
  for name in RUNS:
    _assert_distinct_members(
        _cached_run(name, 8, CONFIG, digits).states[0]["params"])


def test_shared_key_is_caught(monkeypatch):
  monkeypatch.setattr(ensemble, "member_keys", _shared_key)
  state = reference.create_state(0, CONFIG, reference.make_placement(8))
  with pytest.raises(AssertionError, match="share"):
    _assert_distinct_members(reference.to_host(state)["params"])


def test_another_key_for_one_member_is_caught(digits, monkeypatch):
  def one_key_changed(seed, members):
    keys = np.array(jax.random.key_data(_MEMBER_KEYS(seed, members)))
    keys[3] = jax.random.key_data(jax.random.key(seed + 1))
    return jax.random.wrap_key_data(keys)

  ported = _cached_run("shard_map", 8, CONFIG, digits).states[0]
  monkeypatch.setattr(ensemble, "member_keys", one_key_changed)
  state = reference.create_state(0, CONFIG, reference.make_placement(8))
  with pytest.raises(AssertionError, match="member 3 "):
    _assert_members_match(ported, reference.to_host(state))


def test_learning_rate_change_is_caught(digits):
  # One member on one device, the cheapest step to compile. The 1% larger
  # learning rate is swapped into the reference's optimiser after the init,
  # so that the init (whose compilation takes the learning rate as a static
  # argument) is not compiled again.
  config = dataclasses.replace(CONFIG, members=1)
  ported = _cached_run("pmap", 1, config, digits).states
  placement = reference.make_placement(1)
  state = tuple(
      member.replace(tx=optax.sgd(config.learning_rate * 1.01,
                                  config.momentum))
      for member in reference.create_state(config.seed, config, placement))
  train_step = reference.make_train_step(config, placement, "reference")
  batch = next(batches.train_batches(digits, config.seed, config.global_batch,
                                     1))
  state, _ = train_step(state, reference.put_batch(batch, placement))
  unperturbed = _cached_run("reference", 8, CONFIG, digits).states[1]
  _assert_members_match(ported[1], jax.tree.map(lambda x: x[:1], unperturbed))
  with pytest.raises(AssertionError, match="differs"):
    _assert_members_match(ported[1], reference.to_host(state))


@pytest.mark.parametrize("members", [4, 16])
def test_pmap_refuses_other_than_one_member_per_device(members):
  config = dataclasses.replace(CONFIG, members=members)
  placement = legacy.make_placement(8)
  with pytest.raises(configs.EnsembleSizeError,
                     match="one member per device"):
    legacy.create_state(0, config, placement)


@pytest.mark.parametrize("members", [0, 4, 12])
def test_port_refuses_members_not_a_multiple_of_devices(members):
  config = dataclasses.replace(CONFIG, members=members)
  with pytest.raises(configs.EnsembleSizeError, match="multiple"):
    port.create_state(0, config, port.make_placement(8))


def test_vmapped_members_stay_close_to_reference(digits):
  # vmap batches the members' convolutions and matmuls: ~1 ulp per step
  # (1.4e-7 of a leaf's max after one step), so close, not bitwise, over
  # these three steps; the SGD drift over epochs is in docs/ensemble-notes.md.
  config = dataclasses.replace(CONFIG, members=16, member_loop="vmap")
  ported, truth = (run.states for run in _runs(
      [("shard_map", 8, config),
       ("reference", 8, dataclasses.replace(config, member_loop="sequential"))],
      digits))
  for at in (1, -1):
    _assert_members_match(ported[at], truth[at])
  # Negative control: the same check on a 1% learning-rate change.
  moved = _cached_run("shard_map", 8, dataclasses.replace(
      config, learning_rate=config.learning_rate * 1.01), digits).states
  with pytest.raises(AssertionError, match="differs by"):
    _assert_members_match(moved[-1], truth[-1])
