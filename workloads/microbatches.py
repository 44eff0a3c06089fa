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

from workloads import registry

LOOPS = ("scan", "scan_unroll", "fori", "python", "multisteps")

# What `auto` picks, from the measurements in docs/accumulation-notes.md.
# XLA:CPU runs the conv backward inside a rolled loop (scan, fori) on a slow
# path, 3-6x slower than unrolled code, so CPU unrolls; it then schedules the
# K microbatches side by side, which saves little memory: pass `scan` where
# memory is the point. Accelerators keep the rolled scan, the classic advice
# (not measured here): one copy of the step in the program whatever K, and
# one microbatch's activations live at a time.
AUTO = {"cpu": "scan_unroll", "gpu": "scan", "tpu": "scan"}


class AccumulationError(ValueError):
  """An unknown loop, or a loop the workload cannot take."""


def resolve_loop(loop: str, platform: str) -> str:
  """`loop`, with `auto` replaced by the choice for `platform`."""
  if loop == "auto":
    return AUTO.get(platform, "scan")
  if loop not in LOOPS:
    raise AccumulationError(f"unknown accum loop {loop!r}; choose one of "
                            f"auto, {', '.join(LOOPS)}")
  return loop


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
  """The workload's initial state; under `multisteps` its optimiser wrapped.

  Raises:
    AccumulationError: `multisteps` on a workload without an optax optimiser.
  """
  state = registry.init_state(seed, config)
  if config.accum_loop != "multisteps":
    return state
  if not hasattr(state, "tx"):
    raise AccumulationError(f"accum loop multisteps needs an optax optimiser; "
                            f"workload {config.workload} has none")
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


class OptimizerStep:
  """One optimiser step made of K calls of a one-microbatch step.

  Under `multisteps` the compiled step takes one microbatch per call and
  optax.MultiSteps updates the params on every K-th call. This object calls
  it K times, so that it reads like any other `(state, batch) -> (state,
  metrics)` step; its loss is the mean over the calls. `lower(...)
  .compile()` gives another `OptimizerStep` around the compiled call, so
  that code which swaps a step for its compiled form still makes whole
  optimiser steps.

  Attributes:
    micro_step: the one-microbatch step (jitted, or compiled).
    calls_per_step: K, the calls that make one optimiser step. Anything else
      (`as_text`, `memory_analysis`) is `micro_step`'s: the HLO and memory
      of one call, so collectives per optimiser step are K times its count.
  """

  def __init__(self, micro_step, calls_per_step):
    self.micro_step = micro_step
    self.calls_per_step = calls_per_step

  def __call__(self, state, batch):
    losses = []
    for _ in range(self.calls_per_step):
      state, metrics = self.micro_step(state, batch)
      losses.append(metrics["loss"])
      if jax.devices()[0].platform == "cpu":
        # Queued steps holding collectives can deadlock the emulated CPU
        # devices' rendezvous (compare/timing.py): one call at a time.
        jax.block_until_ready(state)
    return state, {"loss": sum(losses[1:], losses[0]) / len(losses)}

  def lower(self, *args, **kwargs):
    return _LoweredOptimizerStep(self.micro_step.lower(*args, **kwargs),
                                 self.calls_per_step)

  def __getattr__(self, name):
    if name == "micro_step":  # not set yet: no recursion
      raise AttributeError(name)
    return getattr(self.micro_step, name)


class _LoweredOptimizerStep:
  """A lowered one-microbatch step whose `compile()` is an `OptimizerStep`."""

  def __init__(self, lowered, calls_per_step):
    self.lowered = lowered
    self.calls_per_step = calls_per_step

  def compile(self, *args, **kwargs):
    return OptimizerStep(self.lowered.compile(*args, **kwargs),
                         self.calls_per_step)

  def __getattr__(self, name):
    if name == "lowered":
      raise AttributeError(name)
    return getattr(self.lowered, name)


def per_optimizer_step(step, loop, accum_steps):
  """`step` as one optimiser step: wrapped in `OptimizerStep` if multisteps."""
  return OptimizerStep(step, accum_steps) if loop == "multisteps" else step
