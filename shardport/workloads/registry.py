"""Workloads by name: the model, its loss normalisation, metrics and optimiser.

A workload is pure math on one shard of data; the backends decide where each
shard lives and how its results are reduced.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.training.train_state
import jax
import jax.numpy as jnp
import optax

from shardport.workloads import cnn
from shardport.workloads import configs
from shardport.workloads import linear512
from shardport.workloads import linreg

Params = Any
Batch = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Workload:
  """One trainable program.

  Attributes:
    name: the `--workload` name.
    dataset: the dataset it trains on unless told otherwise.
    classifies: whether accuracy means anything for it.
    init_params: `(key, example_inputs) -> params`.
    loss: `(params, batch, divisor) -> scalar`, the loss of `batch` as the
      classic program normalises it; `divisor` is the number of equal
      per-device parts the global batch is split into (see each workload's
      loss for what it divides).
    metric_sums: `(params, batch) -> {"loss_sum", "correct", "count"}`.
    make_state: `(params, config) -> state` with `.params`, `.opt_state` and
      `.apply_gradients(grads=...)`.
    input_shape: one example's input shape, `None` for any size of a free
      dimension (checked against the dataset before anything compiles).
    target_kind: `"label"` (int32 class indices) or `"value"` (float32
      `[1]`).
    optax_optimizer: whether `make_state`'s state carries an optax `tx`.
    defaults: config fields this workload trains with unless told otherwise.
  """

  name: str
  dataset: str
  classifies: bool
  init_params: Callable[..., Params]
  loss: Callable[[Params, Batch, int], jax.Array]
  metric_sums: Callable[[Params, Batch], dict[str, jax.Array]]
  make_state: Callable[[Params, configs.TrainConfig], Any]
  input_shape: tuple[int | None, ...]
  target_kind: str
  optax_optimizer: bool = True
  defaults: dict[str, Any] = dataclasses.field(default_factory=dict)


def _flax_metrics(module, error_sum, correct_count):
  """`metric_sums` of a flax module from its summed error and correct count."""

  def metric_sums(params, batch):
    outputs = module.apply({"params": params}, batch["inputs"])
    return {"loss_sum": error_sum(outputs, batch["targets"]),
            "correct": correct_count(outputs, batch["targets"]),
            "count": jnp.asarray(batch["targets"].shape[0])}

  return metric_sums


_CNN = cnn.CNN()


def _cnn_init(key, inputs_BHWC):
  return _CNN.init(key, inputs_BHWC[:1])["params"]


def _cnn_loss(params, batch, divisor):
  # The classic program sums the loss over each device's batch and averages
  # across devices: the global loss is sum / n_devices, so the gradient grows
  # with the per-device batch (global_batch / n_devices). Changing the device
  # count at a fixed global batch rescales the gradient, hence the effective
  # learning rate, by the inverse ratio.
  logits = _CNN.apply({"params": params}, batch["inputs"])
  return cnn.cross_entropy_sum(logits, batch["targets"]) / divisor


def _cnn_state(params, config):
  return flax.training.train_state.TrainState.create(
      apply_fn=_CNN.apply, params=params,
      tx=optax.sgd(config.learning_rate, momentum=config.momentum or None))


def _linreg_loss(params, batch, divisor):
  # The tutorial averages within a device and across devices: with equal
  # shards that is the global mean, whatever the device count.
  del divisor
  return linreg.squared_error_sum(
      params, batch["inputs"], batch["targets"]) / batch["targets"].size


def _linreg_metrics(params, batch):
  return {"loss_sum": linreg.squared_error_sum(params, batch["inputs"],
                                               batch["targets"]),
          "correct": jnp.asarray(0),
          "count": jnp.asarray(batch["targets"].shape[0])}


def _linreg_state(params, config):
  return linreg.SGDState(step=jnp.asarray(0), params=params,
                         learning_rate=config.learning_rate)


_LINEAR512 = linear512.Linear()


def _linear512_init(key, inputs_BF):
  return _LINEAR512.init(key, inputs_BF[:1])["params"]


def _linear512_loss(params, batch, divisor):
  # Summed like the CNN's loss, with the same sum / divisor normalisation.
  outputs = _LINEAR512.apply({"params": params}, batch["inputs"])
  return linear512.squared_error_sum(outputs, batch["targets"]) / divisor


def _linear512_state(params, config):
  return flax.training.train_state.TrainState.create(
      apply_fn=_LINEAR512.apply, params=params,
      tx=optax.adam(config.learning_rate))


WORKLOADS = {
    "cnn": Workload(
        name="cnn", dataset="digits", classifies=True, init_params=_cnn_init,
        loss=_cnn_loss,
        metric_sums=_flax_metrics(_CNN, cnn.cross_entropy_sum,
                                  cnn.correct_count),
        make_state=_cnn_state, input_shape=(None, None, 1),
        target_kind="label"),
    "linreg": Workload(
        name="linreg", dataset="linreg", classifies=False,
        init_params=linreg.init_params, loss=_linreg_loss,
        metric_sums=_linreg_metrics, make_state=_linreg_state,
        input_shape=(1,), target_kind="value", optax_optimizer=False,
        defaults={"global_batch": 128, "steps": 100, "learning_rate": 0.05,
                  "momentum": 0.0}),
    # The labels are random, so accuracy on the test split is chance by
    # construction: `classifies` is False although `correct` is counted.
    # The classic takes microbatches of 4 (K=16 on one device); with the
    # compare default K=4 on 8 devices a microbatch is 2 examples.
    "linear512": Workload(
        name="linear512", dataset="linear512", classifies=False,
        init_params=_linear512_init, loss=_linear512_loss,
        metric_sums=_flax_metrics(_LINEAR512, linear512.squared_error_sum,
                                  linear512.correct_count),
        make_state=_linear512_state, input_shape=(512,), target_kind="value",
        defaults={"global_batch": 64, "steps": 20, "learning_rate": 1e-3,
                  "momentum": 0.0}),
}


class WorkloadError(ValueError):
  """An unknown workload name, or data the workload cannot take."""


def get(name: str) -> Workload:
  """The workload called `name`."""
  if name not in WORKLOADS:
    raise WorkloadError(f"unknown workload {name!r}; choose one of "
                        f"{', '.join(sorted(WORKLOADS))}")
  return WORKLOADS[name]


def check_data(workload: Workload, data) -> None:
  """Raises WorkloadError when `data`'s examples do not fit `workload`.

  A mismatch must never broadcast silently into another loss (a `[B]`
  prediction against `[B, 1]` targets is a `[B, B]` error matrix).

  Args:
    workload: the workload.
    data: a `shardport.workloads.datasets.Dataset`.
  """
  shape = data.train_inputs.shape[1:]
  expected = workload.input_shape
  fits = len(shape) == len(expected) and all(
      e is None or e == s for e, s in zip(expected, shape))
  targets = data.train_targets
  if workload.target_kind == "label":
    fits = fits and targets.ndim == 1 and targets.dtype.kind in "iu"
  else:
    fits = fits and targets.shape[1:] == (1,) and targets.dtype.kind == "f"
  if fits and workload.name == "cnn":
    fits = min(shape[:2]) >= 4
  if not fits:
    wanted = "x".join("N" if e is None else str(e) for e in expected)
    raise WorkloadError(
        f"workload {workload.name} takes examples of shape {wanted} with "
        f"{workload.target_kind} targets; dataset {data.name} has "
        f"{'x'.join(map(str, shape))} with targets "
        f"{targets.dtype}{list(targets.shape[1:])}")


def init_state(seed: int, config: configs.TrainConfig):
  """The initial train state on the default device, identical for every backend.

  Args:
    seed: seeds the parameter init.
    config: the run's configuration; `config.input_shape` is one example's
      shape.

  Returns:
    The workload's train state (see `Workload.make_state`).
  """
  workload = get(config.workload)
  example = jnp.zeros((1, *config.input_shape), jnp.float32)
  params = workload.init_params(jax.random.key(seed), example)
  return workload.make_state(params, config)
