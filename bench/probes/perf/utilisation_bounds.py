"""What bounds the CNN's share of the machine's f32 peak, in CPU time.

  python -m bench.probes.perf.utilisation_bounds [--dataset synthetic:28x28]
      [--batch 128] [--devices 8] [--windows 8]

Wall-clock GFLOP/s over a wall-clock matmul peak swings with the machine's
load (the peak probe itself read 20-40 GFLOP/s at load 15-20 on a machine
whose unloaded peak was ~385). This probe divides by process CPU time
instead (all threads; `time.process_time`), which other people's jobs
hardly change, and splits one data-parallel shard_map step into parts that
run alone on the same mesh:

  matmul        1024^3 f32 matmul, one device: GFLOP per CPU-second (the
                peak the compute could reach).
  step          the sharded data-parallel CNN step (cost-analysis FLOPs x
                devices): its GFLOP per CPU-second, and per wall-second.
  one_device    the same global batch on one device, no collective.
  noop          a jitted shard_map that returns its input on every device:
                dispatching one multi-device program.
  all_reduce    a shard_map that only psums a gradient-shaped tuple (the
                step's one all-reduce, alone).
  copy          a jitted elementwise x*1.0001 over a 64 MiB array: memory
                bandwidth in GB per CPU-second (read + write).

Each part is timed interleaved with the others window by window
(`bench/probes/perf/paired.py`); medians over windows are printed.
"""

import argparse
import os
import statistics

from bench.probes.perf import probe_env


def _parse():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--devices", type=int, default=8)
  p.add_argument("--batch", type=int, default=128)
  p.add_argument("--dataset", default="synthetic:28x28")
  p.add_argument("--windows", type=int, default=8)
  return p.parse_args()


ARGS = _parse()
probe_env.emulate(ARGS.devices)

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.probes.perf import paired
from compare._src.measure import hlo as hlo_lib
from shardport.strategies.data_parallel import Reference as reference
from sharded import data_parallel as port
from shardport.workloads import batches, configs


def _cost(compiled, n):
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return cost.get("flops", 0.0) * n, cost.get("bytes accessed", 0.0) * n


def main():
  data, base = probe_env.cnn_fields(ARGS.dataset, ARGS.batch)
  config = configs.TrainConfig(**base)
  host = next(batches.train_batches(data, 0, ARGS.batch, 1))
  mesh = port.make_placement(ARGS.devices)
  runs, info = {}, {}

  step = port.make_train_step(config, mesh, "shard_map")
  state = port.create_state(0, config, mesh)
  batch = port.put_batch(host, mesh)
  compiled = step.lower(state, batch).compile()
  info["step"] = _cost(compiled, ARGS.devices)
  grad_bytes = hlo_lib.executed(compiled.as_text()).all_reduce_bytes
  runs["step"] = (step, state, batch)

  one = reference.make_placement(1)
  ref_step = reference.make_train_step(config, one, "reference")
  ref_state = reference.create_state(0, config, one)
  ref_batch = reference.put_batch(host, one)
  info["one_device"] = _cost(ref_step.lower(ref_state, ref_batch).compile(), 1)
  runs["one_device"] = (ref_step, ref_state, ref_batch)

  a = jnp.ones((1024, 1024), jnp.float32)
  matmul = jax.jit(lambda x: x @ x)
  runs["matmul"] = (lambda s, _: (matmul(s) * 0 + s, None), a, None)
  info["matmul"] = (2 * 1024**3 + 2 * 1024**2, 0)  # the product, * 0 and +

  noop = jax.jit(jax.shard_map(lambda x: x + 1, mesh=mesh, in_specs=P("data"),
                               out_specs=P("data")), donate_argnums=0)
  runs["noop"] = (lambda s, _: (noop(s), None),
                  jax.device_put(jnp.zeros((ARGS.devices,)),
                                 NamedSharding(mesh, P("data"))), None)
  info["noop"] = (0, 0)

  grads = jax.tree.map(lambda x: jax.device_put(
      jnp.ones((ARGS.devices,) + x.shape, x.dtype),
      NamedSharding(mesh, P("data"))), state.params)
  reduce = jax.jit(jax.shard_map(
      lambda g: jax.tree.map(lambda x: x * 0.5,
                             lax.psum(jax.tree.map(lambda x: x[0], g), "data")),
      mesh=mesh, in_specs=P("data"), out_specs=P()))
  runs["all_reduce"] = (lambda s, _: (s, reduce(s)), grads, None)
  info["all_reduce"] = (0, 0)

  big = jnp.ones((16 * 1024 * 1024,), jnp.float32)  # 64 MiB
  scale = jax.jit(lambda x: x * 1.0001, donate_argnums=0)
  runs["copy"] = (lambda s, _: (scale(s), None), big, None)
  info["copy"] = (0, 2 * big.nbytes)

  result = paired.measure(runs, windows=ARGS.windows)
  med = {n: (statistics.median(r["wall_ms"]), statistics.median(r["cpu_ms"]))
         for n, r in result.items()}
  print(f"jax {jax.__version__}, {ARGS.devices} devices, dataset "
        f"{ARGS.dataset}, global batch {ARGS.batch}, load "
        f"{os.getloadavg()[0]:.1f}; gradient all-reduced "
        f"{grad_bytes / 1024:.0f} KiB per step")
  peak_cpu = info["matmul"][0] / med["matmul"][1] / 1e6
  peak_wall = info["matmul"][0] / med["matmul"][0] / 1e6
  for name in runs:
    wall, cpu = med[name]
    flops, nbytes = info[name]
    line = f"{name:11s} wall {wall:8.2f} ms  CPU {cpu:8.2f} ms"
    if flops:
      line += (f"  {flops / 1e6:8.1f} MFLOP  {flops / cpu / 1e6:6.1f} GFLOP/"
               f"CPU-s ({100 * flops / cpu / 1e6 / peak_cpu:4.1f}% of the "
               f"matmul's)  {flops / wall / 1e6:6.1f} GFLOP/wall-s")
    if nbytes:
      line += f"  {nbytes / 1e6:7.1f} MB accessed, {nbytes / cpu / 1e6:5.1f} GB/CPU-s"
    print(line)
  print(f"matmul peak: {peak_cpu:.1f} GFLOP per CPU-second, {peak_wall:.1f} "
        f"per wall-second now")


if __name__ == "__main__":
  main()
