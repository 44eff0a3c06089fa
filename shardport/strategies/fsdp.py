"""fsdp: data parallelism with the train state sharded over the devices.

pmap (`legacy_pmap.fsdp`), shard_map and jit (`sharded.fsdp`) against
data_parallel's single-device reference and data_parallel's own shard_map
port on the same batches.

The sharding rule, shared by both backends (`shard_axis`): a leaf of the
train state (params, optimiser state, any other array field) is split over
the N devices along its FIRST axis whose length is a positive multiple of N;
a leaf with no such axis (scalars such as `step` or adam's `count`, a bias of
10 on 8 devices) stays replicated. Every device then holds 1/N of each split
leaf. With N = 1 every non-scalar leaf is "split" into one piece, i.e. the
whole leaf.

Reported beside the verdict, all from the same run: each run's bytes of
params + optimiser state on one device (its addressable shards), against the
data_parallel run's replicated state (target: at most 1/N + 0.1 of it); the bytes
each step all-gathers and reduce-scatters against the data_parallel run's
all-reduce (`compare._src.measure.hlo`, in each run's entry); and examples/s against the
data_parallel run, window by window.
"""

import sys

import jax
from jax import lax

from shardport.strategies import negative_controls as controls
from shardport.strategies import throughput
from shardport.strategies.data_parallel import DataParallel
from shardport.strategies.data_parallel import FINAL
from shardport.strategies.data_parallel import Reference
from shardport.strategies.negative_controls import NegativeControl
from shardport.strategies.strategy import RunSpec
from shardport.strategies.tolerances import Tolerance

MEMORY_TARGET = 0.10  # per-device state <= (1/N + 0.1) of the replicated
BASELINE = "data_parallel"  # the run with the replicated state
REPLICATED = -1


# region: fsdp-helpers
def shard_axis(shape, n: int) -> int:
  """The axis a leaf of `shape` is split along over `n` devices, or
  `REPLICATED` (-1) where no axis divides."""
  for i, size in enumerate(shape):
    if size >= n and size % n == 0:
      return i
  return REPLICATED


def shard_axes(tree, n: int):
  """`shard_axis` of every leaf of `tree` (arrays or shape structs)."""
  return jax.tree.map(lambda x: shard_axis(x.shape, n), tree)


def gather(params, axes, axis_name):
  """The full params from each device's shards (replicated leaves as they
  are)."""
  return jax.tree.map(lambda x, a: x if a == REPLICATED else
                      lax.all_gather(x, axis_name, axis=a, tiled=True),
                      params, axes)


def scatter_mean(grads, axes, axis_name, n):
  """Each device's shard of the mean gradient over devices (the mean itself
  for replicated leaves)."""
  return jax.tree.map(lambda g, a: lax.pmean(g, axis_name) if a == REPLICATED
                      else reduce_scatter(g, axis_name, a, n) / n,
                      grads, axes)


def reduce_scatter_is_safe() -> bool:
  """Whether `lax.psum_scatter` sums right every time on this run's devices.

  Not where gloo carries the collectives (every `jax.distributed` job on
  CPU, one process too): gloo's reduce-scatter, which jaxlib 0.10.2 calls
  for it, now and then leaves wrong values at the end of rank 0's block
  (jax-ml/jax#40830). A 2-process fsdp job then ended with another digest
  in about 1 run of 6, its first step already differing in device 0's block
  of the one large gradient (docs/jax-facts.md, Multi-process).
  """
  return not (jax.devices()[0].platform == "cpu"
              and jax.distributed.is_initialized()
              and jax.config.jax_cpu_collectives_implementation == "gloo")


def reduce_scatter(x, axis_name, axis, n):
  """This device's block (along `axis`) of the sum of `x` over the devices:
  `lax.psum_scatter(..., tiled=True)`, except where gloo carries the
  collectives (`reduce_scatter_is_safe`): there an all-reduce, then this
  device's block of it, every block the same sum on every device."""
  if reduce_scatter_is_safe():
    return lax.psum_scatter(x, axis_name, scatter_dimension=axis, tiled=True)
  size = x.shape[axis] // n
  return lax.dynamic_slice_in_dim(lax.psum(x, axis_name),
                                  lax.axis_index(axis_name) * size, size,
                                  axis=axis)
# endregion


def wrong_shard(module, run):
  """Each device updates its shard with its neighbour's gradient shard: the
  reduce-scatter's output rolled by one device (`lax.ppermute`). Looked up
  when the step is traced, as `no_pmean`; the jit port has no
  reduce-scatter of its own, so it is unchanged there."""
  del run
  scatter = reduce_scatter

  def rolled(x, axis_name, axis, n):
    out = scatter(x, axis_name, axis, n)
    return lax.ppermute(out, axis_name, [(i, (i + 1) % n) for i in range(n)])

  def make_train_step(config, placement, variant):
    step = module.make_train_step(config, placement, variant)

    def train_step(state, batch):
      this = sys.modules[__name__]  # scatter_mean looks it up when traced
      with controls._patched(this, "reduce_scatter", rolled):  # pylint: disable=protected-access
        return step(state, batch)

    return train_step

  return controls._with(module, make_train_step=make_train_step)  # pylint: disable=protected-access



class Fsdp(DataParallel):
  """Data parallelism with params and optimiser state sharded over `data`:
  data_parallel's program, defaults and input checks (the batch must divide
  over the devices), the state split by `shard_axis`."""

  name = "fsdp"
  program = "fsdp"
  rank = 4
  # It saves the same state as data_parallel, as whole leaves: a job goes on
  # either way (`shardport.strategies.restorable`).
  restores = (BASELINE,)
  runs = (RunSpec("pmap", "legacy_pmap.fsdp", "pmap"),
          RunSpec("shard_map", "sharded.fsdp", "shard_map"),
          RunSpec("jit", "sharded.fsdp", "jit"),
          RunSpec(BASELINE, "sharded.data_parallel", "shard_map"),
          RunSpec("reference", Reference, "reference"))
  pairs = (("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference"), ("jit", "reference"),
           ("shard_map", BASELINE), (BASELINE, "reference"))
  tolerances = {
      "first_step": Tolerance(rtol=1e-5, atol=1e-5, reason=(
          "As for data_parallel: the gradient is the mean of N devices' "
          "gradients (a reduce-scatter / N here, pmean there) against one "
          "sum over the global batch; only the summation order differs. "
          "The all-gather moves bits unchanged. 1e-5 is data_parallel's "
          "first-step tolerance; the wrong-shard mistake moves whole "
          "leaves (tests/test_fsdp.py).")),
      "final": FINAL,
  }
  negative_controls = (
      NegativeControl("wrong-shard", "each device updates its params shard "
                      "with its neighbour's gradient shard (the "
                      "reduce-scatter's output rolled by one device)",
                      wrong_shard),
      NegativeControl("lr-1pct", "the port's learning rate x 1.01",
                      controls.learning_rate_1pct),
      *controls.late_controls(),
  )

  def report_lines(self, report):
    """Each port's state per device against data_parallel's, its collectives
    and its speed over data_parallel's."""
    runs, n = report["runs"], report["devices"]
    base = runs.get(BASELINE, {})
    full = base.get("state_bytes_per_device")
    lines = [_collectives_line(BASELINE, base)] if base else []
    for name, run in runs.items():
      mine = run.get("state_bytes_per_device")
      if not mine or not full or name in (BASELINE, "reference"):
        continue
      ratio = mine / full
      ok = ratio <= 1 / n + MEMORY_TARGET
      lines.append(
          f"{name:<13} params+opt state per device {mine} B = {ratio:.3f}x "
          f"{BASELINE}'s {full} B (target <= 1/{n} + {MEMORY_TARGET:g} = "
          f"{1 / n + MEMORY_TARGET:.3f}: {'met' if ok else 'NOT met'})")
      lines.append(_collectives_line(name, run))
      speed = throughput.throughput_ratio(
          {**report, "throughput_pair": (BASELINE, name)})
      if speed:
        lines.append(
            f"{'':<13} examples/s over {BASELINE}'s, window by window: "
            f"median {speed['median']:.3f}, quartiles "
            f"{speed['quartiles'][0]:.3f}-{speed['quartiles'][1]:.3f}")
    return lines


def _collectives_line(name, run):
  """What one step of `run` all-gathers, reduce-scatters and all-reduces,
  and any other collective the compiler chose."""
  counts = run.get("collectives_per_step") or {}
  sizes = run.get("collective_bytes_per_step") or {}
  shown = ("all-gather", "reduce-scatter", "all-reduce")
  shown += tuple(op for op in sizes if op not in shown and sizes[op])
  parts = [f"{op} {counts.get(op, 0)} x = {sizes.get(op, 0) / 1024:.1f} KiB"
           for op in shown]
  total = sum(sizes.values()) / 1024
  return (f"{name:<13} per step: {', '.join(parts)} (unsharded sizes; "
          f"{total:.1f} KiB in all)")


STRATEGY = Fsdp()
