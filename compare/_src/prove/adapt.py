"""A team's program as it is written, in the shape the harness runs.

The harness runs `(state, batch) -> (state, metrics)` on a train state with
`params`, `opt_state` and `step`. Programs are written otherwise: the pmap
tutorial's `update(params, xs, ys) -> (params, loss)`, an optax program's
`step(params, opt_state, batch) -> (params, opt_state, loss)`. Two pieces
bridge them without rewriting the team's step:

- `adapt_step` (public) calls a step of another signature: the state's parts
  and the batch's named arrays spread over its arguments, its outputs
  gathered back into `(state, metrics)`;
- `HeldState` (internal) holds a state of any pytree shape (a NamedTuple, a
  tuple, a dict, a chex dataclass, an `nnx.State`) with a step counter the
  harness keeps itself, so that controls, lockstep, digests and checkpoints
  work as they do on a flax `TrainState`.

Metrics may be a scalar (the loss), a tuple (the loss first) or a dict.
"""

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.struct
import jax
import numpy as np


def adapt_step(step: Callable, state_parts: int = 1,
               batch_keys: Sequence[str] | None = None, *,
               step_index: bool = False,
               static_args: Sequence[Any] = ()) -> Callable:
  """`step` of another signature as `(state, batch) -> (state, metrics)`.

  Args:
    step: the team's step, pmap'd, jitted or plain, as written.
    state_parts: how many leading arguments (and leading outputs) the state
      spans: 1 for `update(params, ...)`, 2 for `step(params, opt_state,
      ...)`, whose state is then the tuple `(params, opt_state)`.
    batch_keys: the batch's arrays, by key, passed as the following
      arguments (`("xs", "ys")` for `update(params, xs, ys)`); None passes
      the batch whole as one argument.
    step_index: the step takes the optimiser step's index first and does
      not return it (`jax.example_libraries.optimizers`' `update(i,
      opt_state, batch)`): the state is then `(i, *parts)`, the index
      counted here (a `Port`'s init gives `(0, opt_init(params))`). The
      step gets one index, as a training loop gives it (a pmap takes it
      with `in_axes=None`), where pmap's stacked state holds a copy per
      device.
    static_args: values passed after the batch's arguments, as written at
      the call (`p_step(state, batch, True)` with
      `static_broadcasted_argnums=(2,)`): `static_args=(True,)`.

  Returns:
    The step in the harness's shape. The outputs after the state's are the
    metrics: one is taken as it is (a scalar loss, a tuple or a dict); a
    step that returns only its state reports no metrics, and its state
    alone is judged (JAX's SPMD MNIST example's `spmd_update`).

  Example:
    `compare.adapt_step(update, batch_keys=("xs", "ys"))` for the pmap
    tutorial's `update(params, xs, ys) -> (params, loss)`;
    `compare.adapt_step(update, step_index=True)` for `update(i,
    opt_state, batch) -> (opt_state, loss)`.
  """
  def adapted(state, batch):
    index, state = (state[0], state[1:]) if step_index else (None, state)
    if step_index:
      parts = state if state_parts > 1 else (state[0],)
    else:
      parts = (state,) if state_parts == 1 else tuple(state)
    args = ((batch,) if batch_keys is None
            else tuple(batch[key] for key in batch_keys))
    # pmap's stacked state holds a copy of the index per device.
    given = index[0] if step_index and np.ndim(index) else index
    out = step(*((given,) if step_index else ()), *parts, *args,
               *static_args)
    # A NamedTuple (an optimiser state) is one output, not several.
    out = out if type(out) is tuple else (out,)  # pylint: disable=unidiomatic-typecheck
    new = out[0] if state_parts == 1 else tuple(out[:state_parts])
    if step_index:
      new = (index + 1, *((new,) if state_parts == 1 else new))
    rest = out[state_parts:]
    return new, (rest[0] if len(rest) == 1 else tuple(rest))

  adapted.__name__ = getattr(step, "__name__", "step")
  adapted.signature = StepSignature(
      step, state_parts, None if batch_keys is None else tuple(batch_keys),
      step_index, tuple(static_args))
  return adapted


@dataclasses.dataclass(frozen=True)
class StepSignature:
  """What `adapt_step` was told of a step: how the harness's `(state,
  batch)` maps onto its arguments (`python -m compare.rewrite --global
  --prove` places them so).

  Attributes:
    step: the team's step, as given.
    state_parts: its leading arguments (and outputs) that are the state.
    batch_keys: the batch's arrays passed as the arguments after them, by
      key; None: the batch whole, one argument.
    step_index: it takes the step's index first (one value, not mapped).
    static_args: the static values passed after the batch's arguments.
  """

  step: Callable
  state_parts: int
  batch_keys: tuple | None
  step_index: bool
  static_args: tuple

  def adapt(self, step: Callable) -> Callable:
    """`step` (another step of the same signature) adapted alike."""
    return adapt_step(step, self.state_parts, self.batch_keys,
                      step_index=self.step_index,
                      static_args=self.static_args)


def metrics_dict(metrics) -> dict:
  """A step's metrics as a dict: a scalar is the `loss`, a tuple is the
  loss then `metric_1`, `metric_2`, ...; a dict stays as it is."""
  if isinstance(metrics, dict):
    return metrics
  if isinstance(metrics, (tuple, list)):
    return {("loss" if i == 0 else f"metric_{i}"): m
            for i, m in enumerate(metrics)}
  return {"loss": metrics}


def is_train_state(state) -> bool:
  """Whether `state` is a flax struct train state the harness runs as is."""
  return (all(hasattr(state, f) for f in ("params", "opt_state", "step"))
          and hasattr(state, "replace")
          and hasattr(state, "__dataclass_fields__"))


@flax.struct.dataclass
class HeldState:
  """A team's state of any pytree shape, and the harness's step counter.

  Reports name its leaves under `params` (the team's whole state: its
  optimiser state, if it has one, included).
  """

  params: Any
  opt_state: tuple = ()
  step: Any = None


def hold(state) -> HeldState:
  """`state`'s arrays held with a step counter at 0 (int32, as jax makes
  it); its other leaves are kept apart (`partition`)."""
  arrays, _ = partition(state)
  return HeldState(params=arrays, opt_state=(),
                   step=np.zeros((), np.int32))


def is_array(leaf) -> bool:
  """Whether a leaf of a team's state is data the harness places and
  compares: an array, or a Python number (which jax makes an array of);
  a string, a bool, a callable or any other object is part of the program
  (an equinox BatchNorm's `axis_name` and `inference`), as
  `eqx.partition(model, eqx.is_array)` takes it."""
  return (isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float,
                            complex)) and not isinstance(leaf, bool))


def partition(tree) -> tuple[Any, Any]:
  """`(arrays, the rest)`: two trees of `tree`'s shape, each with None
  where the other has the leaf (equinox's `partition`)."""
  arrays = jax.tree.map(lambda x: x if is_array(x) else None, tree)
  rest = jax.tree.map(lambda x: None if is_array(x) else x, tree)
  return arrays, rest


def combine(arrays, rest) -> Any:
  """`partition`'s two trees as one again (equinox's `combine`)."""
  return jax.tree.map(lambda a, r: r if a is None else a, arrays, rest,
                      is_leaf=lambda x: x is None)


def held_step(step: Callable, compiled: bool, rest=None) -> Callable:
  """The team's `step` on its own state, run on a `HeldState`: the counter
  advances by one per call, the metrics become a dict; `rest`, the state's
  leaves that are not arrays (`partition`), joins the arrays for the call.
  `compiled` jits the wrapper (a jitted port or reference step: it lowers,
  so its compile time and collectives are measured); a pmap'd step is
  called from Python."""
  def run(held, batch):
    state = held.params if rest is None else combine(held.params, rest)
    state, metrics = step(state, batch)
    if rest is not None:
      state, _ = partition(state)
    return (held.replace(params=state, step=held.step + 1),
            metrics_dict(metrics))

  run.__name__ = getattr(step, "__name__", "step")
  if not (compiled and hasattr(step, "lower_each")):
    return jax.jit(run) if compiled else run
  # A step that says which programs are its own (a rewritten port, without
  # the adapter around it): the report counts those, not this wrapper's
  # (a per-device loss averaged here was one all-reduce more).
  held_run = functools.partial(jax.jit(run))  # a jit takes no attribute
  held_run.lower_each = lambda held, batch: step.lower_each(
      held.params if rest is None else combine(held.params, rest), batch)
  return held_run


def tree_of(state) -> Any:
  """The team's own state inside a `HeldState`, else `state`."""
  return state.params if isinstance(state, HeldState) else state


def to_numpy(tree) -> Any:
  """Every leaf as a host numpy array (Python scalars as jax makes them)."""
  return jax.device_get(jax.tree.map(jax.numpy.asarray, tree))
