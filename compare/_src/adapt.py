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

from collections.abc import Callable, Sequence
from typing import Any

import flax.struct
import jax
import numpy as np


def adapt_step(step: Callable, state_parts: int = 1,
               batch_keys: Sequence[str] | None = None) -> Callable:
  """`step` of another signature as `(state, batch) -> (state, metrics)`.

  Args:
    step: the team's step, pmap'd, jitted or plain, as written.
    state_parts: how many leading arguments (and leading outputs) the state
      spans: 1 for `update(params, ...)`, 2 for `step(params, opt_state,
      ...)`, whose state is then the tuple `(params, opt_state)`.
    batch_keys: the batch's arrays, by key, passed as the following
      arguments (`("xs", "ys")` for `update(params, xs, ys)`); None passes
      the batch whole as one argument.

  Returns:
    The step in the harness's shape. The outputs after the state's are the
    metrics: one is taken as it is (a scalar loss, a tuple or a dict).

  Example:
    `compare.adapt_step(update, batch_keys=("xs", "ys"))` for the pmap
    tutorial's `update(params, xs, ys) -> (params, loss)`.
  """
  def adapted(state, batch):
    parts = (state,) if state_parts == 1 else tuple(state)
    args = ((batch,) if batch_keys is None
            else tuple(batch[key] for key in batch_keys))
    out = step(*parts, *args)
    new = out[0] if state_parts == 1 else tuple(out[:state_parts])
    rest = out[state_parts:]
    return new, (rest[0] if len(rest) == 1 else tuple(rest))

  adapted.__name__ = getattr(step, "__name__", "step")
  return adapted


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
  """`state` held with a step counter at 0 (int32, as jax makes it)."""
  return HeldState(params=state, opt_state=(), step=np.zeros((), np.int32))


def held_step(step: Callable, compiled: bool) -> Callable:
  """The team's `step` on its own state, run on a `HeldState`: the counter
  advances by one per call, the metrics become a dict. `compiled` jits the
  wrapper (a jitted port or reference step: it lowers, so its compile time
  and collectives are measured); a pmap'd step is called from Python."""
  def run(held, batch):
    state, metrics = step(held.params, batch)
    return (held.replace(params=state, step=held.step + 1),
            metrics_dict(metrics))

  run.__name__ = getattr(step, "__name__", "step")
  return jax.jit(run) if compiled else run


def tree_of(state) -> Any:
  """The team's own state inside a `HeldState`, else `state`."""
  return state.params if isinstance(state, HeldState) else state


def to_numpy(tree) -> Any:
  """Every leaf as a host numpy array (Python scalars as jax makes them)."""
  return jax.device_get(jax.tree.map(jax.numpy.asarray, tree))
