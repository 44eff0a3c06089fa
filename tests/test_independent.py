"""Checks that do not trust the shared code: closed forms, numpy, learning.

Every other check compares backends that share the workloads' loss, init and
optimiser, so a mistake in those (a negated loss) passes them all. These
check the shared math against what it should compute, independently:

- the linreg step against its closed-form gradient, on every backend;
- the CNN's loss and metrics against a numpy softmax cross-entropy;
- every strategy's default run learning (the one-device reference): loss
  falls, accuracy far above chance;
- every backend's evaluation against numpy and against each other, on the
  same state, with several members per device for the ensemble.

Each has a negative control: the mistake it exists to catch, planted.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shardport.strategies import negative_controls
from shardport import strategies
from shardport.strategies.tolerances import Tolerance
from tests import helpers
from shardport.workloads import batches
from shardport.workloads import datasets
from shardport.workloads import ensemble
from shardport.workloads import registry

N_DEVICES = jax.device_count()
STRATEGIES = strategies.STRATEGIES
# Evaluation sums: counts exact, float sums and probabilities to float32
# rounding (a sum over 360 examples, or over 8 devices' partial sums, moves
# ~1e-6 of its value; probabilities ~1e-7).
EVALUATION = Tolerance(rtol=1e-5, atol=1e-6)


def _run(strategy, name):
  return next(run for run in strategy.runs if run.name == name)


# --- (a) linreg: the closed-form gradient ------------------------------


def _closed_form_step(params, batch, learning_rate):
  """One SGD step on the mean squared error, and that loss, in float64."""
  x = np.asarray(batch["inputs"], np.float64)
  y = np.asarray(batch["targets"], np.float64)
  w, b = float(params["weight"]), float(params["bias"])
  error = w * x + b - y
  # d/dw mean((w x + b - y)^2) = 2 mean(error x); d/db = 2 mean(error).
  grad = {"weight": 2 * np.mean(error * x), "bias": 2 * np.mean(error)}
  return ({k: params[k] - learning_rate * grad[k] for k in params},
          np.mean(error ** 2))


def _linreg_first_step(strategy, run, module=None):
  data = datasets.load("linreg")
  config = strategy.make_config({"workload": "linreg"}, data)
  strategy.validate(config, data, N_DEVICES)
  done = helpers.run(module or run.module, run.variant, config, data,
                     N_DEVICES, 1, keep_states=True,
                     calls=strategy.calls_per_step(config, run.name))
  batch = next(batches.train_batches(data, config.seed, config.global_batch,
                                     1))
  params, loss = _closed_form_step(done.states[0]["params"], batch,
                                   config.learning_rate)
  tol = strategy.tolerances["first_step"]
  helpers.assert_close(done.states[1]["params"], params, tol, dtypes=False)
  np.testing.assert_allclose(done.metrics[0]["loss"], loss, rtol=tol.rtol)


@pytest.mark.parametrize("name", [name for name, spec in STRATEGIES.items()
                                  if "linreg" in spec.workloads])
def test_linreg_step_is_the_closed_form_gradient(name):
  strategy = STRATEGIES[name]
  for run in strategy.runs:
    _linreg_first_step(strategy, run)


def test_closed_form_check_catches_a_dropped_pmean():
  # Each device steps with its own shard's gradient: not the batch's.
  strategy = STRATEGIES["data_parallel"]
  run = _run(strategy, "shard_map")
  with pytest.raises(AssertionError, match="differs"):
    _linreg_first_step(strategy, run,
                       negative_controls.no_pmean(run.module, run.name))


# --- (b) the CNN's loss against numpy ------------------------------------


def test_numpy_cross_entropy_by_hand():
  # p(label 1) = 3 / (1 + 3): the loss is log(4/3).
  np.testing.assert_allclose(
      helpers.cross_entropy(np.array([[0.0, np.log(3.0)]]), np.array([1])),
      [np.log(4 / 3)])


def _cnn_case(digits):
  """A few examples and params whose logits spread over several nats."""
  workload = registry.get("cnn")
  # Random params of the init's shapes, drawn in numpy: compiling the CNN's
  # init takes ~10 s on XLA:CPU, and any params will do here.
  shapes = jax.eval_shape(workload.init_params, jax.random.key(0),
                          digits.train_inputs[:1])
  rng = np.random.default_rng(0)
  params = jax.tree.map(
      lambda s: rng.normal(0, 0.3, s.shape).astype(s.dtype), shapes)
  batch = {"inputs": digits.train_inputs[:6],
           "targets": digits.train_targets[:6]}
  return workload, params, batch


def _assert_cnn_loss_is_cross_entropy(workload, params, batch):
  logits = helpers.cnn_logits(params, batch["inputs"])
  expected = helpers.cross_entropy(logits, batch["targets"])
  assert np.ptp(expected) > 1  # examples far apart: a wrong label shows

  @jax.jit  # one program: each function compiled on its own takes seconds
  def losses(params, batch):
    # The classic normalisation: the sum / the device count (1 or 8 here);
    # the ensemble's member loss is the mean (the HOWTO's).
    return {"sum": workload.loss(params, batch, 1),
            "sum / 8": workload.loss(params, batch, 8),
            "member mean": ensemble.loss_fn(params, batch)[0],
            "metric sums": workload.metric_sums(params, batch)}

  helpers.assert_close(
      losses(params, batch),
      {"sum": expected.sum(), "sum / 8": expected.sum() / 8,
       "member mean": expected.mean(),
       "metric sums": helpers.classifier_sums(logits, batch["targets"])},
      EVALUATION, dtypes=False)


def test_cnn_loss_is_softmax_cross_entropy(digits):
  _assert_cnn_loss_is_cross_entropy(*_cnn_case(digits))


def test_cnn_loss_check_catches_a_negated_loss(digits):
  workload, params, batch = _cnn_case(digits)
  negated = dataclasses.replace(
      workload, loss=lambda p, b, d: -workload.loss(p, b, d))
  with pytest.raises(AssertionError):
    _assert_cnn_loss_is_cross_entropy(negated, params, batch)


# --- (c) every default run learns ------------------------------------------


def _learn(strategy, data):
  """Trains the reference on the default config; the curve's two ends."""
  config = strategy.make_config({}, data)
  strategy.validate(config, data, N_DEVICES)
  reference = _run(strategy, "reference")
  module = reference.module
  placement = module.make_placement(N_DEVICES)
  state = module.create_state(config.seed, config, placement)
  evaluate = module.make_evaluate(config, placement)
  test = module.put_batch(batches.test_batch(data, N_DEVICES), placement)
  summary = lambda state: strategy.summarize(
      module.metrics_to_host(evaluate(state, test)), config)
  before = summary(state)
  done = helpers.drive(
      module, placement, state,
      module.make_train_step(config, placement, reference.variant),
      batches.train_batches(data, config.seed, config.global_batch,
                            config.steps))
  losses = np.array([float(m["loss"]) for m in done.metrics])
  return before, summary(done.state), losses


def _assert_learns(before, after, losses):
  window = max(1, len(losses) // 10)
  assert losses[-window:].mean() < 0.25 * losses[:window].mean(), losses
  assert after["test_loss"] < 0.25 * before["test_loss"], (before, after)
  # Ten classes: chance is 0.1.
  assert after["test_accuracy"] > 0.9, after


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_default_run_learns(digits, name):
  _assert_learns(*_learn(STRATEGIES[name], digits))


def test_learning_check_catches_a_negated_loss(digits, monkeypatch):
  # The mistake every backend would share: training climbs the loss.
  workload = registry.get("cnn")
  monkeypatch.setitem(registry.WORKLOADS, "cnn", dataclasses.replace(
      workload, loss=lambda p, b, d: -workload.loss(p, b, d)))
  with pytest.raises(AssertionError):
    _assert_learns(*_learn(STRATEGIES["data_parallel"], digits))


# --- (d) evaluation across backends, on the same state ----------------------


def _cases():
  """Each strategy's default config, with several members per device where
  it takes them (one per device, with pmap, is in test_ensemble.py;
  ensemble_data's members each span a row of devices)."""
  several = {"ensemble": {"members": 2 * N_DEVICES}}
  return [(name, several.get(name, {})) for name in STRATEGIES]


_EVALUATE = {}


def _evaluate(module, config, placement, fresh):
  """`module.make_evaluate`, compiled once per program unless `fresh`.

  Strategies share evaluation programs (accumulation's is data_parallel's).
  """
  key = (module.make_evaluate, config.workload,
         getattr(config, "member_loop", None))
  if fresh:
    return module.make_evaluate(config, placement)
  if key not in _EVALUATE:
    _EVALUATE[key] = module.make_evaluate(config, placement)
  return _EVALUATE[key]


def _expected(params, test, stacked):
  """The evaluation's sums in numpy from host params (members `stacked`)."""
  if stacked:
    return helpers.ensemble_sums(
        helpers.member_logits(params, test["inputs"]), test["targets"])
  return helpers.classifier_sums(helpers.cnn_logits(params, test["inputs"]),
                                 test["targets"])


def _check_evaluations(data, name, options, fresh=()):
  """Every active run's evaluation of its initial state (the same state in
  every backend) equals numpy's and every pair's other side.

  The runs named in `fresh` build their evaluation anew (a planted mistake).
  """
  strategy = STRATEGIES[name]
  config = strategy.make_config(options, data)
  strategy.validate(config, data, N_DEVICES)
  test = batches.test_batch(data, N_DEVICES)
  active = strategy.active_runs(config, N_DEVICES)
  states, sums = {}, {}
  for run in strategy.runs:
    if run.name not in active:
      continue
    module = run.module
    placement = module.make_placement(N_DEVICES)
    state = module.create_state(config.seed, config, placement)
    states[run.name] = module.to_host(state)
    evaluate = _evaluate(module, config, placement, run.name in fresh)
    sums[run.name] = module.metrics_to_host(
        evaluate(state, module.put_batch(test, placement)))
  truth = states["reference"]
  for run_name, state in states.items():
    helpers.assert_bitwise(state, truth)  # the same state everywhere
  expected = _expected(truth["params"], test, hasattr(config, "members"))
  assert np.sum(expected.get("correct", expected.get("ensemble_correct"))) > 0
  for run_name, got in sums.items():
    try:
      helpers.assert_close(got, expected, EVALUATION, dtypes=False)
    except AssertionError as error:
      raise AssertionError(f"{name} {run_name} against numpy: {error}")
  for a, b in strategy.pairs:
    if a in sums and b in sums:
      helpers.assert_close(sums[a], sums[b], EVALUATION)


@pytest.mark.parametrize("name, options", _cases())
def test_evaluation_agrees_across_backends_and_with_numpy(digits, name,
                                                          options):
  _check_evaluations(digits, name, options)


def test_evaluation_check_catches_zero_correct_in_one_backend(digits,
                                                              monkeypatch):
  module = _run(STRATEGIES["data_parallel"], "shard_map").module
  make_evaluate = module.make_evaluate

  def zero_correct(config, placement):
    evaluate = make_evaluate(config, placement)
    return lambda state, batch: {**evaluate(state, batch),
                                 "correct": jnp.zeros((), jnp.int32)}

  monkeypatch.setattr(module, "make_evaluate", zero_correct)
  with pytest.raises(AssertionError, match="shard_map against numpy"):
    _check_evaluations(digits, "data_parallel", {}, fresh=("shard_map",))


class _MemberZeroSoftmax:
  """`jax` as a module sees it, except that `jax.nn.softmax` of stacked
  members' logits `[members, batch, classes]` gives every member member 0's
  probabilities: the ensemble then averages only member 0 of each device
  before the mean across devices."""

  def __getattr__(self, name):
    return getattr(jax, name)

  class nn:  # pylint: disable=invalid-name
    @staticmethod
    def softmax(x, axis=-1):
      probs = jax.nn.softmax(x, axis=axis)
      return jnp.broadcast_to(probs[:1], probs.shape) if x.ndim == 3 else probs


def test_evaluation_check_catches_averaging_one_member_per_device(
    digits, monkeypatch):
  strategy = STRATEGIES["ensemble"]
  module = _run(strategy, "shard_map").module
  monkeypatch.setattr(module, "jax", _MemberZeroSoftmax())
  # With one member per device, member 0 is every member: it takes two.
  with pytest.raises(AssertionError, match=r"shard_map .*\['ensemble_"):
    _check_evaluations(digits, "ensemble", {"members": 2 * N_DEVICES},
                       fresh=("shard_map",))
