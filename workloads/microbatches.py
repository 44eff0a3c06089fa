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
# path, several times slower than unrolled code, so CPU unrolls. Accelerators
# keep the rolled scan, the classic advice: one copy of the step in the
# program whatever K, and one microbatch's activations live at a time.
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
  if loop == "python":
    # Unrolled at trace time: K copies of the step in the program.
    total = value_and_grad(params, take(0))
    for i in range(1, k):
      total = add(total, value_and_grad(params, take(i)))
  else:
    shapes = jax.eval_shape(value_and_grad, params, take(0))
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    if loop == "fori":
      total = lax.fori_loop(
          0, k, lambda i, acc: add(acc, value_and_grad(params, take(i))),
          zeros)
    else:
      body = lambda acc, micro: (add(acc, value_and_grad(params, micro)), None)
      total, _ = lax.scan(body, zeros, microbatches_K,
                          unroll=k if loop == "scan_unroll" else 1)
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
  metrics)` step; its loss is the mean over the calls.

  Attributes:
    micro_step: the compiled one-microbatch step.
    calls_per_step: K, the calls that make one optimiser step.
    lower: `micro_step.lower`: its HLO and memory are those of one call, so a
      collective count per optimiser step is K times the count in its HLO.
  """

  def __init__(self, micro_step, calls_per_step):
    self.micro_step = micro_step
    self.calls_per_step = calls_per_step
    self.lower = micro_step.lower

  def __call__(self, state, batch):
    losses = []
    for _ in range(self.calls_per_step):
      state, metrics = self.micro_step(state, batch)
      losses.append(metrics["loss"])
    return state, {"loss": sum(losses[1:], losses[0]) / len(losses)}


def per_optimizer_step(step, loop, accum_steps):
  """`step` as one optimiser step: wrapped in `OptimizerStep` if multisteps."""
  return OptimizerStep(step, accum_steps) if loop == "multisteps" else step
