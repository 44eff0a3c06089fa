"""The tests' one run driver and one closeness check (not a test module).

Driver: `run` (and `train`, its final host state) builds a backend's
placement, state and step and drives it over host batches with
`shardport.training.dispatch.optimizer_step`, so that a step made of several calls
(optax.MultiSteps) is one optimiser step here as in `compare`.

Check: `assert_close` / `assert_bitwise` / `verdict` are thin asserts over
`compare._src.prove.equivalence.compare_trees`, the check `compare` itself reports.
A `Tolerance`'s atol is relative to each leaf's largest |value|.
"""

import dataclasses

import chex
import jax
import numpy as np

from compare._src.prove import equivalence
from shardport.training import dispatch
from shardport.strategies import tolerances
from shardport.workloads import batches
from shardport.workloads import cnn


def leaf_scaled(atol: float) -> tolerances.Tolerance:
  """`|a - b| <= atol * max|b leaf|` for every element, no relative term."""
  return tolerances.Tolerance(rtol=0.0, atol=atol)


def verdict(actual, expected, tol: tolerances.Tolerance) -> str:
  """`compare_trees`' verdict: bitwise, close or differ."""
  return equivalence.compare_trees(actual, expected, tol)["verdict"]


def _first_differing_leaf(actual, expected, tol, members):
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(actual),
                          jax.tree.leaves(expected)):
    if verdict(a, b, tol) != equivalence.DIFFER:
      continue
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(float(np.abs(b).max(initial=0.0)), 1e-30)
    where = ""
    diff = np.abs(a - b)
    if members and a.ndim:
      per_member = diff.reshape(len(a), -1).max(axis=1)
      member = int(np.nan_to_num(per_member, nan=np.inf).argmax())
      where, diff = f"member {member} ", per_member[member]
    error = float(np.max(diff, initial=0.0))
    return (f"{jax.tree_util.keystr(path)}: {where}differs by {error:.3g} "
            f"abs, {error / scale:.1e} of the leaf's max (atol {tol.atol}, "
            f"rtol {tol.rtol})")
  return "differ"


def assert_close(actual, expected, tol: tolerances.Tolerance, *,
                 members: bool = False, dtypes: bool = True) -> dict:
  """Raises AssertionError unless `compare_trees(actual, expected, tol)`
  says bitwise or close; returns its result.

  The message names the first leaf that differs and, with `members` (trees
  with a leading member axis), the member that differs most in it. With
  `dtypes=False` (a float64 numpy expectation) only shapes must match, and
  `expected` is cast to `actual`'s dtypes.
  """
  if dtypes:
    chex.assert_trees_all_equal_shapes_and_dtypes(actual, expected)
  else:
    expected = jax.tree.map(np.asarray, expected)
    chex.assert_trees_all_equal_shapes(actual, expected)
    expected = jax.tree.map(
        lambda a, e: np.asarray(e).astype(np.asarray(a).dtype), actual,
        expected)
  result = equivalence.compare_trees(actual, expected, tol)
  if result["verdict"] == equivalence.DIFFER:
    raise AssertionError(_first_differing_leaf(actual, expected, tol,
                                               members))
  return result


def assert_bitwise(actual, expected) -> None:
  """Raises AssertionError unless every leaf holds the same bits."""
  chex.assert_trees_all_equal_structs(actual, expected)
  result = equivalence.compare_trees(actual, expected, leaf_scaled(0.0))
  assert result["verdict"] == equivalence.BITWISE, (
      f"not bitwise: {result['worst']} max abs {result['max_abs']:.3g}, "
      f"{result['max_ulp']} ulp")


@dataclasses.dataclass
class Trained:
  """A run driven by `drive`: its last device state and what it recorded.

  Attributes:
    module: the strategy module that ran.
    placement: its placement.
    state: the last state, on the devices.
    host: `module.to_host(state)`.
    states: host states after the init and after each step (`keep_states`),
      else empty.
    metrics: `module.metrics_to_host` of each optimiser step's metrics.
  """

  module: object
  placement: object
  state: object
  host: object
  states: list
  metrics: list

  def evaluate(self, config, test_batch):
    """`make_evaluate`'s host metric sums of the last state on `test_batch`."""
    evaluate = self.module.make_evaluate(config, self.placement)
    batch = self.module.put_batch(test_batch, self.placement)
    return self.module.metrics_to_host(evaluate(self.state, batch))


def drive(module, placement, state, step, host_batches, calls: int = 1,
          keep_states: bool = False) -> Trained:
  """Runs one optimiser step (`calls` calls of `step`) per host batch."""
  whole_step = dispatch.optimizer_step(step, calls)
  states = [module.to_host(state)] if keep_states else []
  metrics = []
  for host_batch in host_batches:
    state, step_metrics = whole_step(state,
                                     module.put_batch(host_batch, placement))
    # Queued collective steps can deadlock XLA:CPU's emulated devices
    # (shardport.training.dispatch.max_in_flight): wait for each step.
    jax.block_until_ready(state)
    metrics.append(module.metrics_to_host(step_metrics))
    if keep_states:
      states.append(module.to_host(state))
  return Trained(module, placement, state, module.to_host(state), states,
                 metrics)


def run(module, variant, config, data, n_devices, steps=None, *,
        calls: int = 1, keep_states: bool = False) -> Trained:
  """`steps` (default `config.steps`) steps of one backend on `data`."""
  placement = module.make_placement(n_devices)
  state = module.create_state(config.seed, config, placement)
  step = module.make_train_step(config, placement, variant)
  order = batches.train_batches(data, config.seed, config.global_batch,
                                steps or config.steps)
  return drive(module, placement, state, step, order, calls, keep_states)


def train(module, variant, config, data, n_devices, steps=None, *,
          calls: int = 1):
  """Runs `steps` steps of one backend; returns the host state."""
  return run(module, variant, config, data, n_devices, steps,
             calls=calls).host


# --- plain numpy, independent of the code under test --------------------
# Only the model's forward pass is shared (`cnn_logits`); losses, metrics and
# the ensemble's averaging are recomputed here.

_CNN = cnn.CNN()
_cnn_apply = jax.jit(lambda params, inputs: _CNN.apply({"params": params},
                                                       inputs))


def cnn_logits(params, inputs):
  """The CNN's logits on the default device, as numpy."""
  return np.asarray(_cnn_apply(params, inputs))


def member(tree, i):
  """Member `i` of a host tree with a leading member axis."""
  return jax.tree.map(lambda x: x[i], tree)


def member_logits(params, inputs):
  """`[members, batch, classes]` logits of stacked members' host params."""
  count = len(jax.tree.leaves(params)[0])
  return np.stack([cnn_logits(member(params, i), inputs)
                   for i in range(count)])


def log_softmax(logits):
  """`log softmax` along the last axis, in float64."""
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def cross_entropy(logits, labels):
  """Per-example softmax cross entropy with integer labels, in float64."""
  labels = np.asarray(labels)
  picked = np.take_along_axis(log_softmax(logits), labels[..., None], -1)
  return -picked[..., 0]


def classifier_sums(logits, labels):
  """`{"loss_sum", "correct", "count"}` of one classifier's logits."""
  return {"loss_sum": cross_entropy(logits, labels).sum(),
          "correct": int((np.argmax(logits, -1) == labels).sum()),
          "count": len(labels)}


def ensemble_sums(stacked_logits, labels):
  """The ensemble evaluation's sums from `[members, batch, classes]` logits.

  Each member's summed loss and correct count, and the ensemble's: the mean
  of the members' softmax probabilities, its correct count and the count.
  """
  probs = np.exp(log_softmax(stacked_logits)).mean(axis=0)
  members = [classifier_sums(logits, labels) for logits in stacked_logits]
  return {"member_loss_sum": np.array([m["loss_sum"] for m in members]),
          "member_correct": np.array([m["correct"] for m in members]),
          "ensemble_correct": int((np.argmax(probs, -1) == labels).sum()),
          "ensemble_probs": probs,
          "count": len(labels)}
