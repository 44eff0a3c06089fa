"""What one all-reduce costs on emulated CPU devices: per operand, per byte.

  python -m bench.probes.perf.allreduce_cost [--devices 8] [--windows 10]

XLA:CPU runs a tuple all-reduce operand by operand (AllReduceThunk calls
the communicator once per buffer), and the in-process communicator makes
every call a rendezvous of all the devices' threads plus a scalar reduction
loop (xla/backends/cpu/collectives/in_process_communicator.cc). So its cost
grows with the operand count as well as the bytes. Each program here is a
shard_map that only psums a tuple of the CNN's gradient shapes (digits
CNN: 9 leaves with the loss, 340.5 KiB), times `copies` distinct copies of
every leaf, or the same bytes concatenated into fewer operands:

  9 ops x1     what the shard_map accumulation step all-reduces
  36 ops x4    what the jit accumulation step all-reduced before the fix
  9 ops x4     the same bytes as 36 ops x4, in 9 operands
  36 ops x1    the same operands as 36 ops x4, a quarter of the bytes
  1 op x1      the step's bytes in one flat operand
  noop         a shard_map without collective: the dispatch floor

Timed interleaved window by window (`bench/probes/perf/paired.py`): ms per call,
wall and process CPU time, medians over windows.
"""

import argparse
import os
import statistics

from bench.probes.perf import probe_env

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--devices", type=int, default=8)
ARGS.add_argument("--windows", type=int, default=10)
ARGS = ARGS.parse_args()
probe_env.emulate(ARGS.devices)

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from bench.probes.perf import paired
from compare._src.measure import hlo
from sharded import devices

# The digits CNN's parameter shapes (shardport/workloads/cnn.py) and the loss.
SHAPES = [(32,), (3, 3, 1, 32), (64,), (3, 3, 32, 64), (256,), (256, 256),
          (10,), (256, 10), ()]
N_ELEMS = sum(int(jnp.prod(jnp.array(s))) if s else 1 for s in SHAPES)


def program(mesh, shapes, copies):
  """A step `(x, _) -> (x, out)` that psums `copies` distinct copies of
  leaves shaped `shapes` (per device) and sums the copies after."""

  def body(x):
    x = x[0]
    leaves, offset = [], 0
    for s in shapes:
      size = 1
      for d in s:
        size *= d
      leaves.append(x[offset:offset + size].reshape(s))
      offset += size
    # Distinct operands (g * (j + 1)): identical ones would be CSE'd.
    out = lax.psum(tuple(g * (j + 1) for g in leaves for j in range(copies)),
                   "data")
    return sum(jnp.sum(o) for o in out)[None]

  step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"),
                               out_specs=P("data")))
  return step


def main():
  mesh = devices.placement(ARGS.devices)
  x = jax.device_put(jnp.ones((ARGS.devices, 4 * N_ELEMS), jnp.float32),
                     NamedSharding(mesh, P("data")))
  cases = {"9 ops x1": (SHAPES, 1), "36 ops x4": (SHAPES, 4),
           "9 ops x4": ([(4 * int(jnp.prod(jnp.array(s))) if s else 4,)
                         for s in SHAPES], 1),
           "36 ops x1": ([s for s in SHAPES for _ in range(4)], 1),
           "1 op x1": ([(N_ELEMS,)], 1)}
  # "36 ops x1" takes 4 x the leaves of SHAPES (4x the elements) divided by
  # 4: the same leaf list 4 times, each a quarter: use the real shapes of
  # a quarter-size model instead would change the operand sizes' spread.
  cases["36 ops x1"] = ([(max(1, (int(jnp.prod(jnp.array(s))) if s else 1)
                              // 4),) for s in SHAPES for _ in range(4)], 1)
  runs = {}
  for name, (shapes, copies) in cases.items():
    step = program(mesh, shapes, copies)
    text = step.lower(x).compile().as_text()
    run = hlo.executed(text)
    ops = text.count("all-reduce(")
    print(f"{name:10s}: {run.all_reduce_bytes / 1024:7.1f} KiB all-reduced, "
          f"{ops} all-reduce instruction(s), operands "
          f"{len(shapes) * copies}")
    runs[name] = ((lambda f: lambda s, _: (s, f(s)))(step), x, None)
  noop = jax.jit(jax.shard_map(lambda v: v[0, :1], mesh=mesh,
                               in_specs=P("data"), out_specs=P("data")))
  runs["noop"] = (lambda s, _: (s, noop(s)), x, None)
  result = paired.measure(runs, windows=ARGS.windows, window_s=0.3)
  print(f"load {os.getloadavg()[0]:.1f}")
  for name, r in result.items():
    print(f"{name:10s} ms/call wall {statistics.median(r['wall_ms']):7.3f} "
          f"({min(r['wall_ms']):.3f}-{max(r['wall_ms']):.3f})  CPU "
          f"{statistics.median(r['cpu_ms']):7.3f} "
          f"({min(r['cpu_ms']):.3f}-{max(r['cpu_ms']):.3f})")


if __name__ == "__main__":
  main()
