"""The train state, optimizer, loss and evaluation shared by both programs."""

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

from examples.resnet import data
from examples.resnet.model import ResNet


class TrainState(train_state.TrainState):
  """flax's TrainState plus BatchNorm statistics and a dropout key.

  Attributes:
    batch_stats: BatchNorm's running means and variances.
    key: The run's dropout key, a raw uint32[2] `jax.random.PRNGKey`; each
      step derives its own keys from it and `step`, so it never changes.
  """

  batch_stats: Any
  key: jax.Array


def make_optimizer(steps: int) -> optax.GradientTransformation:
  """SGD with Nesterov momentum, weight decay and a warmup-cosine schedule.

  Args:
    steps: The run's length; the learning rate decays to 0 over it.

  Returns:
    The optimizer.
  """
  # Warmup from peak/10, not 0: step 1 then moves the parameters, which is
  # what a one-step comparison of the pmap program and the port looks at.
  schedule = optax.warmup_cosine_decay_schedule(
      init_value=0.02, peak_value=0.2, warmup_steps=min(5, steps),
      decay_steps=max(steps, 1))
  # Decay before SGD, so it is scaled by the schedule (coupled L2, as in
  # flax's imagenet example); it also reaches BatchNorm's scale and bias.
  return optax.chain(
      optax.add_decayed_weights(5e-4),
      optax.sgd(learning_rate=schedule, momentum=0.9, nesterov=True))


def create_train_state(seed: int, steps: int) -> TrainState:
  """The initial state on the host: one copy, not replicated.

  Args:
    seed: Seeds the parameters and the dropout key.
    steps: The run's length, for the learning-rate schedule.

  Returns:
    The state, its leaves numpy arrays.
  """
  model = ResNet(axis_name=None)
  init_key, dropout_key = jax.random.split(jax.random.PRNGKey(seed))
  # jit: run eagerly, init would compile each of its ops on its own.
  variables = jax.jit(model.init)(init_key, jnp.zeros((1, 8, 8, 1)))
  state = TrainState.create(
      apply_fn=model.apply, params=variables["params"],
      tx=make_optimizer(steps), batch_stats=variables["batch_stats"],
      key=dropout_key)
  # numpy leaves: the state is committed to no device until a program
  # places it (replicate under pmap, device_put on the mesh in the port).
  return jax.device_get(state)


def loss_and_metrics(model, params, batch_stats, batch, dropout_key):
  """Training-mode loss on this device's examples.

  Args:
    model: The ResNet; its axis_name decides how BatchNorm syncs.
    params: The parameters to differentiate.
    batch_stats: The running BatchNorm statistics.
    batch: `{"image": [b, 8, 8, 1], "label": [b]}`, this device's examples.
    dropout_key: This device's dropout key for this step.

  Returns:
    `(loss, (metrics, new_batch_stats))`, for `value_and_grad(has_aux=True)`;
    the loss is the mean cross entropy over this device's examples.
  """
  logits, updates = model.apply(
      {"params": params, "batch_stats": batch_stats}, batch["image"],
      train=True, rngs={"dropout": dropout_key}, mutable=["batch_stats"])
  loss = optax.softmax_cross_entropy_with_integer_labels(
      logits, batch["label"]).mean()
  accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["label"])
  metrics = {"loss": loss, "accuracy": accuracy}
  return loss, (metrics, updates["batch_stats"])


@jax.jit
def _test_metrics(params, batch_stats, images, labels):
  # axis_name=None: one device, and train=False reads the running averages.
  logits = ResNet(axis_name=None).apply(
      {"params": params, "batch_stats": batch_stats}, images, train=False)
  loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
  return {"test_loss": loss,
          "test_accuracy": jnp.mean(jnp.argmax(logits, -1) == labels)}


def evaluate(state: TrainState) -> dict[str, float]:
  """Test loss and accuracy of a host (unreplicated) state, on one device.

  Args:
    state: One copy of the train state, e.g. `unreplicate` of the pmap
      program's or the port's replicated state (any placement: it is fetched).

  Returns:
    `{"test_loss": float, "test_accuracy": float}` over `data.test_set()`.
  """
  params, batch_stats = jax.device_get((state.params, state.batch_stats))
  test = data.test_set()
  metrics = _test_metrics(params, batch_stats, test["image"], test["label"])
  return {name: float(value) for name, value in metrics.items()}
