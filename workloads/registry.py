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

from workloads import cnn
from workloads import configs
from workloads import linear512
from workloads import linreg

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
    loss: `(params, batch, shards) -> scalar`, the loss of `batch` as the
      classic program normalises it when the batch is split into `shards`
      equal per-device parts (see each workload's loss for what that means).
    metric_sums: `(params, batch) -> {"loss_sum", "correct", "count"}`.
    make_state: `(params, config) -> state` with `.params`, `.opt_state` and
      `.apply_gradients(grads=...)`.
    defaults: `TrainConfig` fields this workload trains with unless told
      otherwise.
  """

  name: str
  dataset: str
  classifies: bool
  init_params: Callable[..., Params]
  loss: Callable[[Params, Batch, int], jax.Array]
  metric_sums: Callable[[Params, Batch], dict[str, jax.Array]]
  make_state: Callable[[Params, configs.TrainConfig], Any]
  defaults: dict[str, Any] = dataclasses.field(default_factory=dict)


_CNN = cnn.CNN()


def _cnn_init(key, inputs_BHWC):
  return _CNN.init(key, inputs_BHWC[:1])["params"]


def _cnn_loss(params, batch, shards):
  # The classic program sums the loss over each device's batch and averages
  # across devices: the global loss is sum / n_devices, so the gradient grows
  # with the per-device batch (global_batch / n_devices). Changing the device
  # count at a fixed global batch rescales the gradient, hence the effective
  # learning rate, by the inverse ratio.
  logits = _CNN.apply({"params": params}, batch["inputs"])
  return cnn.cross_entropy_sum(logits, batch["targets"]) / shards


def _cnn_metrics(params, batch):
  logits = _CNN.apply({"params": params}, batch["inputs"])
  return {"loss_sum": cnn.cross_entropy_sum(logits, batch["targets"]),
          "correct": cnn.correct_count(logits, batch["targets"]),
          "count": jnp.asarray(batch["targets"].shape[0])}


def _cnn_state(params, config):
  return flax.training.train_state.TrainState.create(
      apply_fn=_CNN.apply, params=params,
      tx=optax.sgd(config.learning_rate, momentum=config.momentum or None))


def _linreg_loss(params, batch, shards):
  # The tutorial averages within a device and across devices: with equal
  # shards that is the global mean, whatever the device count.
  del shards
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


def _linear512_loss(params, batch, shards):
  # Summed like the CNN's loss, with the same sum / shards normalisation.
  outputs = _LINEAR512.apply({"params": params}, batch["inputs"])
  return linear512.squared_error_sum(outputs, batch["targets"]) / shards


def _linear512_metrics(params, batch):
  outputs = _LINEAR512.apply({"params": params}, batch["inputs"])
  return {"loss_sum": linear512.squared_error_sum(outputs, batch["targets"]),
          "correct": linear512.correct_count(outputs, batch["targets"]),
          "count": jnp.asarray(batch["targets"].shape[0])}


def _linear512_state(params, config):
  return flax.training.train_state.TrainState.create(
      apply_fn=_LINEAR512.apply, params=params,
      tx=optax.adam(config.learning_rate))


WORKLOADS = {
    "cnn": Workload("cnn", "digits", True, _cnn_init, _cnn_loss,
                    _cnn_metrics, _cnn_state),
    "linreg": Workload("linreg", "linreg", False, linreg.init_params,
                       _linreg_loss, _linreg_metrics, _linreg_state,
                       defaults={"global_batch": 128, "steps": 100,
                                 "learning_rate": 0.05, "momentum": 0.0}),
    # The labels are random, so accuracy on the test split is chance by
    # construction: `classifies` is False although `correct` is counted.
    # The classic takes microbatches of 4 (K=16 on one device); with the
    # compare default K=4 on 8 devices a microbatch is 2 examples.
    "linear512": Workload("linear512", "linear512", False, _linear512_init,
                          _linear512_loss, _linear512_metrics,
                          _linear512_state,
                          defaults={"global_batch": 64, "steps": 20,
                                    "learning_rate": 1e-3,
                                    "momentum": 0.0}),
}


class WorkloadError(ValueError):
  """An unknown workload name."""


def get(name: str) -> Workload:
  """The workload called `name`."""
  if name not in WORKLOADS:
    raise WorkloadError(f"unknown workload {name!r}; choose one of "
                        f"{', '.join(sorted(WORKLOADS))}")
  return WORKLOADS[name]


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
