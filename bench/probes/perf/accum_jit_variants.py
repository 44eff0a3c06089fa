"""Jit accumulation variants against the shard_map port: HLO, memory, speed.

  python -m bench.probes.perf.accum_jit_variants [--devices 8] [--batch 128]
      [--accum-steps 4] [--loop scan_unroll] [--windows 10] [--repeats 1]
      [--variants current,port] [--dataset digits] [--no-time] [--dump D]

Each variant is a `jax.jit` step on the Auto mesh (the compiler places the
collectives); `shard_map` is the port it is measured against. Printed per
variant: all-reduces executed, their operands and the bytes all-reduced per
step, copies, transposes and the convolutions' layouts in the optimised
HLO, temp bytes, the largest parameter difference after one step from the
shard_map port (relative to the leaf's max|x|), and the speed relative to shard_map timed interleaved window by
window (`bench/probes/perf/paired.py`): the median and quartiles of the per-window
ratios, wall clock and process CPU time, per repeat.

Variants:
  current        sharded/accumulation.py's jit step before issue 13: split
                 per device, `with_sharding_constraint(P(None, 'data'))`,
                 `microbatches.mean_grads` over `[K, n*m]`. Each microbatch's
                 gradient is a global gradient: GSPMD all-reduces each, and
                 XLA:CPU's combiner merges them into one all-reduce of K
                 operands per leaf.
  sumloss        one `value_and_grad` of the mean of the K microbatch losses
                 (the cotangents of the K uses of the params add up inside
                 the backward pass): the same K-fold all-reduce.
  vmap_shards    the batch viewed as `[n, K, m]`, `P('data')` on the shard
                 axis; `vmap` over it of the per-shard accumulation (params
                 unbatched), then the mean over shards. One all-reduce of one
                 gradient, but the kernel-gradient convolutions become
                 grouped convolutions that the partitioner all-gathers (16
                 all-gathers): 0.34x.
  vmap_spmd      vmap_shards with `spmd_axis_name='data'`: the same.
  reduced        params cast to `P(reduced={'data'})` in Explicit axes
                 (`jax.sharding.explicit_axes`), so that their gradients are
                 `unreduced` until one reshard: raises NotImplementedError on
                 the CNN in jax 0.10.2 (no rule for conv_general_dilated).
  dense_reduced  `reduced` on the Dense kernels only (a reduced bias added to
                 a batch-sharded activation is a ShardingTypeError): 564 KiB
                 all-reduced, still 30 operands, 0.66x.
  island         the per-device K microbatches in a collective-free
                 `shard_map`, the mean over devices left to jit: the fix.
  port           whatever `sharded.accumulation.make_train_step(..., 'jit')`
                 builds now (the island since issue 13).
  shard_map_again  a second shard_map step: an A/A control of the timing.
"""

import argparse
import collections
import os
import re
import statistics

from bench.probes.perf import probe_env


def _parse():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--devices", type=int, default=8)
  p.add_argument("--batch", type=int, default=128)
  p.add_argument("--accum-steps", type=int, default=4)
  p.add_argument("--loop", default="scan_unroll")
  p.add_argument("--dataset", default="digits")
  p.add_argument("--variants", default="current,port")
  p.add_argument("--windows", type=int, default=10)
  p.add_argument("--repeats", type=int, default=1)
  p.add_argument("--no-time", action="store_true")
  p.add_argument("--dump", default="")
  return p.parse_args()


ARGS = _parse()
probe_env.emulate(ARGS.devices)

# pylint: disable=wrong-import-position
import einops
import jax
from jax import lax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from bench.probes.perf import paired
from compare._src.measure import hlo as hlo_lib
from sharded import accumulation as port
from sharded import devices
from shardport.workloads import batches, configs, microbatches, registry


def _config():
  data, base = probe_env.cnn_fields(ARGS.dataset, ARGS.batch)
  return data, configs.AccumulationConfig(**base, accum_steps=ARGS.accum_steps,
                                          accum_loop=ARGS.loop)


class _Params:
  """What `microbatches.mean_grads` reads of a state: its params."""

  def __init__(self, params):
    self.params = params


def build(variant, config, placement):
  """A compiled-on-call step `(state, batch) -> (state, {"loss"})`."""
  if variant in ("shard_map", "shard_map_again", "port"):
    return port.make_train_step(config, placement,
                                "jit" if variant == "port" else "shard_map")
  workload = registry.get(config.workload)
  n = placement.shape[devices.AXIS]
  k = config.accum_steps
  loop = config.accum_loop
  grad_of = lambda shards: (lambda params, micro: jax.value_and_grad(
      workload.loss)(params, micro, shards / k))
  replicated = NamedSharding(placement, P())

  def current(state, batch):
    split = microbatches.split(batch, k, shards=n)
    split = lax.with_sharding_constraint(
        split, NamedSharding(placement, P(None, devices.AXIS)))
    loss, grads = microbatches.mean_grads(grad_of(n), state, split, loop)
    return state.apply_gradients(grads=grads), {"loss": loss}

  def sumloss(state, batch):
    split = microbatches.split(batch, k, shards=n)
    split = lax.with_sharding_constraint(
        split, NamedSharding(placement, P(None, devices.AXIS)))

    def total_loss(params):
      losses = [workload.loss(params, jax.tree.map(lambda x, i=i: x[i], split),
                              n / k) for i in range(k)]
      return sum(losses[1:], losses[0]) / k

    loss, grads = jax.value_and_grad(total_loss)(state.params)
    return state.apply_gradients(grads=grads), {"loss": loss}

  def vmap_shards(state, batch, spmd_axis_name=None):
    per_shard = jax.tree.map(
        lambda x: einops.rearrange(x, "(s k m) ... -> s k m ...", s=n, k=k),
        batch)
    per_shard = lax.with_sharding_constraint(
        per_shard, NamedSharding(placement, P(devices.AXIS)))
    loss, grads = jax.vmap(
        lambda micro: microbatches.mean_grads(grad_of(1), state, micro, loop),
        spmd_axis_name=spmd_axis_name)(per_shard)
    loss, grads = jax.tree.map(lambda x: x.mean(0), (loss, grads))
    return state.apply_gradients(grads=grads), {"loss": loss}

  def local_sum(params, split):
    # Explicit mode, inside the Auto program: params cast to `reduced`
    # (free: they are full copies already) make every microbatch gradient
    # `unreduced` (per-device partial sums); the sum over microbatches stays
    # unreduced and one reshard to P() is the step's one all-reduce.
    params = jax.reshard(params, P(reduced={devices.AXIS}))
    loss, grads = microbatches.mean_grads(
        grad_of(n), _Params(params), split, loop)
    return jax.reshard((loss, grads), P())

  def reduced(state, batch):
    split = microbatches.split(batch, k, shards=n)
    split = lax.with_sharding_constraint(
        split, NamedSharding(placement, P(None, devices.AXIS)))
    with jax.sharding.use_abstract_mesh(placement.abstract_mesh):
      loss, grads = jax.sharding.explicit_axes(
          local_sum, axes=devices.AXIS,
          in_sharding=(P(), P(None, devices.AXIS)))(state.params, split)
    return state.apply_gradients(grads=grads), {"loss": loss}

  def local_grads(params, split):
    # One device's K microbatches, no collective: the per-device partial
    # sums the compiler cannot keep apart under plain jit, stacked [1, ...].
    loss, grads = microbatches.mean_grads(grad_of(1), _Params(params), split,
                                          loop)
    return jax.tree.map(lambda x: x[None], (loss, grads))

  island_grads = jax.shard_map(
      local_grads, mesh=placement, in_specs=(P(), P(None, devices.AXIS)),
      out_specs=P(devices.AXIS), check_vma=False)

  def island(state, batch):
    split = microbatches.split(batch, k, shards=n)
    split = lax.with_sharding_constraint(
        split, NamedSharding(placement, P(None, devices.AXIS)))
    loss, grads = island_grads(state.params, split)
    # The mean over the device axis: the one reduction, placed by jit.
    loss, grads = jax.tree.map(lambda x: x.mean(0), (loss, grads))
    return state.apply_gradients(grads=grads), {"loss": loss}

  def dense_reduced(state, batch):
    # `reduced` only where JAX 0.10.2 has the rule: dot_general kernels (no
    # rule for conv_general_dilated; a reduced bias added to a batch-sharded
    # activation is a ShardingTypeError).
    split = microbatches.split(batch, k, shards=n)
    split = lax.with_sharding_constraint(
        split, NamedSharding(placement, P(None, devices.AXIS)))

    def local(params, split):
      params = jax.tree_util.tree_map_with_path(
          lambda path, x: jax.reshard(x, P(reduced={devices.AXIS}))
          if "Dense" in jax.tree_util.keystr(path)
          and "kernel" in jax.tree_util.keystr(path) else x, params)
      # The sum over microbatches stays unreduced; unreduced has no rule
      # for div, so the mean's division comes after the one reshard.
      total = None
      for i in range(k):
        out = grad_of(n)(params, jax.tree.map(lambda x, i=i: x[i], split))
        total = out if total is None else jax.tree.map(jnp.add, total, out)
      return jax.tree.map(lambda t: t / k, jax.reshard(total, P()))

    with jax.sharding.use_abstract_mesh(placement.abstract_mesh):
      loss, grads = jax.sharding.explicit_axes(
          local, axes=devices.AXIS,
          in_sharding=(P(), P(None, devices.AXIS)))(state.params, split)
    return state.apply_gradients(grads=grads), {"loss": loss}

  fn = {"current": current, "sumloss": sumloss, "vmap_shards": vmap_shards,
        "reduced": reduced, "island": island,
        "vmap_spmd": lambda s, b: vmap_shards(s, b, devices.AXIS),
        "dense_reduced": dense_reduced}[variant]
  return jax.jit(fn, out_shardings=replicated, donate_argnums=0)


def main():
  data, config = _config()
  placement = port.make_placement(ARGS.devices)
  host = next(batches.train_batches(data, 0, ARGS.batch, 1))
  batch = port.put_batch(host, placement)
  names = ["shard_map"] + ARGS.variants.split(",")
  steps, after_one = {}, {}
  print(f"jax {jax.__version__}, {ARGS.devices} devices, batch {ARGS.batch}, "
        f"K={ARGS.accum_steps}, loop {ARGS.loop}, dataset {ARGS.dataset}")
  for name in names:
    step = build(name, config, placement)
    state = port.create_state(0, config, placement)
    compiled = step.lower(state, batch).compile()
    text = compiled.as_text()
    if ARGS.dump:
      os.makedirs(ARGS.dump, exist_ok=True)
      with open(os.path.join(ARGS.dump, f"{name}.hlo"), "w") as f:
        f.write(text)
    run = hlo_lib.executed(text)
    mem = compiled.memory_analysis()
    ops = {op: sum(1 for line in text.splitlines()
                   if f" {op}(" in line and " = " in line)
           for op in ("copy", "transpose", "convolution", "fusion")}
    ops["conv layouts"] = dict(collections.Counter(
        re.findall(r"dim_labels=([\w>-]+)", text)))
    operands = [line.split(" all-reduce(")[0].count("f32[")
                for line in text.splitlines() if " all-reduce(" in line]
    new_state, _ = step(state, batch)
    after_one[name] = port.to_host(new_state)
    steps[name] = step
    ref = after_one["shard_map"]
    rel = max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
              for a, b in zip(jax.tree.leaves(after_one[name]),
                              jax.tree.leaves(ref)))
    print(f"{name:12s} all-reduce x{run.collectives['all-reduce']} "
          f"(operands {operands}) "
          f"{run.all_reduce_bytes / 1024:8.1f} KiB/step  other collectives "
          f"{ {k: v for k, v in run.collectives.items() if v and k != 'all-reduce'} }"
          f"  ops {ops}  temp {mem.temp_size_in_bytes / 1024:7.1f} KiB  "
          f"vs shard_map after 1 step: {rel:.2e} of max|leaf|", flush=True)
  if ARGS.no_time:
    return
  for repeat in range(ARGS.repeats):
    runs = {name: (steps[name], port.create_state(0, config, placement),
                   batch) for name in names}
    result = paired.measure(runs, windows=ARGS.windows)
    load = os.getloadavg()[0]
    for name in names[1:]:
      print(f"repeat {repeat + 1}: {name} speed / shard_map's, window-paired "
            f"median (quartiles): wall "
            f"{paired.summary(paired.ratios(result, name, 'shard_map', 'wall_ms'))}"
            f", CPU time "
            f"{paired.summary(paired.ratios(result, name, 'shard_map', 'cpu_ms'))}"
            f"; ms/step wall {statistics.median(result[name]['wall_ms']):.1f} vs "
            f"{statistics.median(result['shard_map']['wall_ms']):.1f}, CPU "
            f"{statistics.median(result[name]['cpu_ms']):.1f} vs "
            f"{statistics.median(result['shard_map']['cpu_ms']):.1f}; "
            f"load {load:.1f}", flush=True)


if __name__ == "__main__":
  main()
