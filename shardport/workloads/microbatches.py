"""Gradient accumulation over microbatches: the loops, shared by both backends.

Pure math on one shard: split a batch into K equal microbatches, and average
the loss and gradient over them with one of several loops. Where the shards
live and how their results are reduced is the backends' business.
"""

import einops
import jax
from jax import lax
import jax.numpy as jnp
import optax

from shardport.workloads import registry

LOOPS = ("scan", "scan_unroll", "fori", "python", "multisteps")


class AccumulationError(ValueError):
  """An unknown loop, or a loop the workload cannot take."""


def check_loop(loop: str) -> None:
  """Raises AccumulationError unless `loop` is one of `LOOPS`.

  `auto` is not a loop: whoever knows the platform resolves it first
  (`shardport.strategies.accumulation.resolve_loop`).
  """
  if loop not in LOOPS:
    raise AccumulationError(f"unknown accum loop {loop!r}; choose one of "
                            f"auto, {', '.join(LOOPS)}")


def check_workload(config) -> None:
  """Raises AccumulationError for `multisteps` on a workload without optax."""
  if (config.accum_loop == "multisteps"
      and not registry.get(config.workload).optax_optimizer):
    raise AccumulationError(f"accum loop multisteps needs an optax optimiser; "
                            f"workload {config.workload} has none")


def calls_per_step(config) -> int:
  """Calls of the step that make one optimiser step: K under multisteps.

  Under `multisteps` the step takes one microbatch per call and
  optax.MultiSteps updates the params on every K-th call, all on the same
  batch; every other loop makes a whole optimiser step per call.
  """
  return config.accum_steps if config.accum_loop == "multisteps" else 1


def split(batch, accum_steps, shards=1):
  """Each leaf `[shards * K * m, ...]` to `[K, shards * m, ...]`.

  Microbatch i takes rows `i*m : (i+1)*m` of each of the `shards` contiguous
  parts, so on a batch split over devices every microbatch is made of rows
  the device already holds. A plain reshape to `[K, -1, ...]` would put
  microbatch i on the devices that hold rows i*B/K..., which moves data.
  """
  return jax.tree.map(
      lambda x: einops.rearrange(x, "(s k m) ... -> k (s m) ...", s=shards,
                                 k=accum_steps), batch)


def mean_grads(value_and_grad, state, microbatches_K, loop):
  """The loss and gradient averaged over the leading microbatch axis.

  Args:
    value_and_grad: `(params, microbatch) -> (loss, grads)`.
    state: the train state; its params are differentiated, and under
      `multisteps` its optimiser state says which microbatch this call takes.
    microbatches_K: the batch with a leading axis of K microbatches.
    loop: a loop from `LOOPS` (`auto` already resolved).

  Returns:
    `(loss, grads)` averaged over the K microbatches; under `multisteps` those
    of the one microbatch this call takes, since optax.MultiSteps averages
    the gradients across calls itself.
  """
  params = state.params
  k = jax.tree.leaves(microbatches_K)[0].shape[0]
  take = lambda i: jax.tree.map(
      lambda x: lax.dynamic_index_in_dim(x, i, keepdims=False),
      microbatches_K)
  add = lambda a, b: jax.tree.map(jnp.add, a, b)
  if loop == "multisteps":
    return value_and_grad(params, take(state.opt_state.mini_step))
  accumulate = lambda total, micro: add(total,
                                        value_and_grad(params, micro))
  # The first microbatch seeds the running total (no zeros to add), so that
  # K=1 has no loop at all and compiles to the data-parallel step: a loop
  # started from zeros fuses differently and differs in the last bit.
  total = value_and_grad(params, take(0))
  if loop == "python":
    # Unrolled at trace time: K copies of the step in the program, the same
    # program as scan_unroll.
    for i in range(1, k):
      total = accumulate(total, take(i))
  elif loop == "fori":
    total = lax.fori_loop(1, k, lambda i, acc: accumulate(acc, take(i)),
                          total)
  elif k > 1:
    rest = jax.tree.map(lambda x: x[1:], microbatches_K)
    body = lambda acc, micro: (accumulate(acc, micro), None)
    total, _ = lax.scan(body, total, rest,
                        unroll=k - 1 if loop == "scan_unroll" else 1)
  return jax.tree.map(lambda t: t / k, total)


def init_state(seed, config):
  """The workload's initial state; under `multisteps` its optimiser wrapped."""
  check_workload(config)
  state = registry.init_state(seed, config)
  if config.accum_loop != "multisteps":
    return state
  tx = optax.MultiSteps(state.tx, every_k_schedule=config.accum_steps)
  tx = tx.gradient_transformation()
  return state.replace(tx=tx, opt_state=tx.init(state.params))


def canonical_opt_state(opt_state):
  """The optimiser state without optax.MultiSteps' wrapper, if it has one.

  After a whole optimiser step the wrapper's accumulator is zero again, so
  its inner state is what every other loop and the reference hold.
  """
  if isinstance(opt_state, optax.MultiStepsState):
    return opt_state.inner_opt_state
  return opt_state


def canonical_step(state):
  """The train state's count of optimiser steps.

  Under optax.MultiSteps the state's own counter counts calls (K per
  optimiser step) and optax counts the optimiser steps (`gradient_step`):
  that count is what every other loop and the reference hold as `step`.
  The call counter is not kept: it follows from the optimiser steps on
  restore (`shardport.training.checkpoints.rebuild`).
  """
  if isinstance(state.opt_state, optax.MultiStepsState):
    return state.opt_state.gradient_step
  return state.step
