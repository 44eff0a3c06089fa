"""Traps in what the compiler makes of a port: all-gathers, loop layouts, reshapes.

Each function returns a `docs.traps_common.Outcome` like those in
`docs/traps.py`, which runs and records them with the others.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
# Raised by Explicit-axis type checks; jax 0.10 does not export it publicly.
from jax._src.core import ShardingTypeError
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from docs.traps_common import N
from docs.traps_common import Outcome
from docs.traps_common import TwoConv
from docs.traps_common import WiderConv
from docs.traps_common import auto_mesh
from docs.traps_common import collectives
from docs.traps_common import compile_counted
from docs.traps_common import host_params
from docs.traps_common import sgd_step
from docs.traps_common import timed


def vmap_ensemble_trap(time_it=False) -> Outcome:
  """An ensemble as `jit(vmap)` over member-sharded params: all-gathers."""
  model, rng = TwoConv(), np.random.default_rng(2)
  images = rng.random((32, 8, 8, 1), dtype=np.float32)
  labels = rng.integers(0, 10, 32).astype(np.int32)
  members = host_params(model, images[:1], rng, members=N)
  step = sgd_step(model)
  # region: trap-vmap-ensemble
  mesh = auto_mesh("ensemble")
  params = jax.device_put(members, NamedSharding(mesh, P("ensemble")))
  batch = jax.device_put((images, labels), NamedSharding(mesh, P()))
  per_member = jax.vmap(step, in_axes=(0, None, None))
  wrong_step = jax.jit(per_member)  # the partitioner gathers members' tensors
  right_step = jax.jit(jax.shard_map(  # each device steps its own member
      per_member, mesh=mesh, in_specs=(P("ensemble"), P(), P()),
      out_specs=P("ensemble")))
  # endregion
  expected = jax.jit(jax.vmap(step, in_axes=(0, None, None)))(
      members, images, labels)
  wrong_step, wrong_counts = compile_counted(wrong_step, params, *batch)
  right_step, right_counts = compile_counted(right_step, params, *batch)
  wrong, right = wrong_step(params, *batch), right_step(params, *batch)
  facts = {"all-gather wrong": wrong_counts["all-gather"],
           "all-gather right": right_counts["all-gather"]}
  explicit = jax.make_mesh((N,), ("ensemble",))
  try:
    jax.jit(per_member)(
        jax.device_put(members, NamedSharding(explicit, P("ensemble"))),
        *jax.device_put((images, labels), NamedSharding(explicit, P())))
    facts["Explicit mesh"] = "ran"
  except ShardingTypeError as err:
    facts["Explicit mesh"] = type(err).__name__
  if time_it:
    facts["slowdown"] = (timed(wrong_step, params, *batch) /
                         timed(right_step, params, *batch))
  return Outcome(wrong=wrong, right=right, expected=expected, facts=facts)


def scan_trap(time_it=False, steps=4) -> Outcome:
  """`lax.scan` over conv training steps on XLA:CPU vs the same unrolled."""
  model, rng = WiderConv(), np.random.default_rng(3)
  images = rng.random((steps, 32, 8, 8, 1), dtype=np.float32)
  labels = rng.integers(0, 10, (steps, 32)).astype(np.int32)
  params = host_params(model, images[0, :1], rng)
  step = sgd_step(model)
  # region: trap-scan
  def train(params, images, labels, unroll):
    body = lambda p, batch: (step(p, *batch), None)
    return lax.scan(body, params, (images, labels), unroll=unroll)[0]

  looped = jax.jit(lambda *a: train(*a, unroll=1))  # a while loop in HLO
  unrolled = jax.jit(lambda *a: train(*a, unroll=True))  # straight-line code
  # endregion
  expected = params
  for i in range(steps):
    expected = jax.jit(step)(expected, images[i], labels[i])
  looped = looped.lower(params, images, labels).compile()
  unrolled = unrolled.lower(params, images, labels).compile()
  facts = {}
  for name, text in (("looped", looped.as_text()),
                     ("unrolled", unrolled.as_text())):
    facts[f"{name} has while"] = " while(" in text
    # XLA:CPU's fast convolution wants b01f_01io->b01f; inside the loop the
    # weight-gradient convolutions keep another layout (the slow path).
    facts[f"{name} other conv layouts"] = sum(
        1 for line in text.splitlines()
        if " convolution(" in line and "dim_labels=b01f_01io->b01f" not in line)
  if time_it:
    facts["slowdown"] = (timed(looped, params, images, labels) /
                         timed(unrolled, params, images, labels))
  return Outcome(wrong=looped(params, images, labels),
                 right=unrolled(params, images, labels), expected=expected,
                 facts=facts)


# region: trap-microbatch-reshape
def split_naive(batch, k):
  """[B, ...] -> [k, B/k, ...]: the microbatch axis takes the device split."""
  return batch.reshape(k, batch.shape[0] // k, *batch.shape[1:])


def split_per_device(batch, k, n_devices=N):
  """[n*k*b, ...] -> [k, n*b, ...]: microbatch i = slice i of every shard."""
  b = batch.shape[0] // (n_devices * k)
  x = batch.reshape(n_devices, k, b, *batch.shape[1:])
  return jnp.swapaxes(x, 0, 1).reshape(k, n_devices * b, *batch.shape[1:])


def accumulate(batch, split, k):
  microbatches = split(batch, k)
  return lax.scan(lambda acc, mb: (acc + jnp.sum(mb ** 2), None), 0.0,
                  microbatches)[0]
# endregion


def microbatch_reshape_trap() -> Outcome:
  """Where the microbatch axis of a `P('data')` batch ends up."""
  host = np.arange(128 * 2, dtype=np.float32).reshape(128, 2) / 256
  auto, explicit = auto_mesh(), jax.make_mesh((N,), ("data",))
  on_auto = jax.device_put(host, NamedSharding(auto, P("data")))
  on_explicit = jax.device_put(host, NamedSharding(explicit, P("data")))
  def spec(a):  # padded: Auto drops trailing Nones, Explicit keeps them
    return tuple(a.sharding.spec) + (None,) * (a.ndim - len(a.sharding.spec))
  wrong = {"Auto k=8": spec(split_naive(on_auto, 8)),
           "Auto k=4": spec(split_naive(on_auto, 4)),
           "Explicit k=8": spec(split_naive(on_explicit, 8))}
  right = {name: spec(split_per_device(a, k))
           for name, a, k in (("Auto k=8", on_auto, 8), ("Auto k=4", on_auto, 4),
                              ("Explicit k=8", on_explicit, 8))}
  facts = {}
  for name, split in (("naive", split_naive), ("per device", split_per_device)):
    fn = jax.jit(lambda a, split=split: accumulate(a, split, 4))
    facts[f"{name} Auto all-gathers"] = collectives(fn, on_auto)["all-gather"]
    facts[f"{name} Auto sum"] = float(fn(on_auto))
    try:
      with jax.set_mesh(explicit):
        facts[f"{name} Explicit scan"] = float(
            jax.jit(lambda a, split=split: accumulate(a, split, 8))(on_explicit))
    except (ValueError, ShardingTypeError) as err:
      facts[f"{name} Explicit scan"] = f"{type(err).__name__}: {err}"[:80]
  facts["host sum"] = float(np.sum(host.astype(np.float64) ** 2))
  return Outcome(wrong=wrong, right=right,
                 expected=dict.fromkeys(right, (None, "data", None)),
                 facts=facts)
