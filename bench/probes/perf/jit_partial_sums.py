"""Minimal reproducer: under jit, XLA:CPU all-reduces every microbatch's
gradient, and the two ways out.

  python -m bench.probes.perf.jit_partial_sums [--devices 8] [--k 4]

A linear model `sum((x @ w)**2)`, `w` replicated, the batch split over a
1-D mesh, K microbatches accumulated (unrolled) and averaged, one SGD step.
Printed per program: all-reduce instructions, operands and bytes in the
optimised HLO (`compare._src.measure.hlo`), temp bytes, and the largest difference of
the new `w` from the plain program's.

  jit          the JAX docs' first recipe. The SPMD partitioner inserts the
               gradient all-reduce inside each microbatch's backward dot (the
               contraction runs over the sharded batch); XLA:CPU's pipeline
               has no AllReduceReassociate (the pass that rewrites
               all-reduce(a) + all-reduce(b) as all-reduce(a + b); the GPU
               pipeline has it), so the combiner merges the K all-reduces into
               one of K operands per leaf: K x the bytes.
  reduced      the same step with `w` cast to `P(reduced={'data'})` in
               Explicit axes (`jax.sharding.explicit_axes`): its gradients
               are `unreduced`, summed locally, reduced once. JAX 0.10.2 has
               the rule for dot_general, not for conv_general_dilated (the
               CNN raises NotImplementedError, printed below), and a reduced
               bias added to a batch-sharded activation is a
               ShardingTypeError.
  shard_map    the per-device sum in a collective-free `shard_map`, the mean
               over devices left to jit (what sharded/accumulation.py's jit
               port does since issue 13).
"""

import argparse

from bench.probes.perf import probe_env

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--devices", type=int, default=8)
ARGS.add_argument("--k", type=int, default=4)
ARGS = ARGS.parse_args()
probe_env.emulate(ARGS.devices)

# pylint: disable=wrong-import-position
import jax
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from compare._src.measure import hlo

N, K, M, D_IN, D_OUT = ARGS.devices, ARGS.k, 16, 256, 128
MESH = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))


def loss(w, x):
  return jnp.sum((x @ w) ** 2)


def split(x):
  """`[N*K*M, D]` to `[K, N*M, D]`: microbatch i is rows i*M:(i+1)*M of
  every device's slice (no data moves)."""
  return x.reshape(N, K, M, D_IN).transpose(1, 0, 2, 3).reshape(K, N * M,
                                                                D_IN)


def accumulate(w, xs):
  total = None
  for i in range(K):
    g = jax.grad(loss)(w, xs[i])
    total = g if total is None else total + g
  return total


def plain(w, x):
  xs = jax.lax.with_sharding_constraint(split(x),
                                        NamedSharding(MESH, P(None, "data")))
  return w - 0.01 * accumulate(w, xs) / K


def reduced(w, x):
  xs = jax.lax.with_sharding_constraint(split(x),
                                        NamedSharding(MESH, P(None, "data")))

  def grads(w, xs):
    w = jax.reshard(w, P(reduced={"data"}))
    return jax.reshard(accumulate(w, xs), P())  # the one all-reduce

  with jax.sharding.use_abstract_mesh(MESH.abstract_mesh):
    g = jax.sharding.explicit_axes(
        grads, axes="data", in_sharding=(P(), P(None, "data")))(w, xs)
  return w - 0.01 * g / K


def island(w, x):
  xs = jax.lax.with_sharding_constraint(split(x),
                                        NamedSharding(MESH, P(None, "data")))
  per_device = jax.shard_map(lambda w, xs: accumulate(w, xs)[None], mesh=MESH,
                             in_specs=(P(), P(None, "data")),
                             out_specs=P("data"), check_vma=False)
  # jit reduces over the device axis: the one all-reduce.
  return w - 0.01 * per_device(w, xs).sum(0) / K


def conv_reduced_error():
  """What `reduced` says about a convolution in this JAX."""
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Explicit,))
  with jax.set_mesh(mesh):
    k = jax.device_put(jnp.ones((3, 3, 1, 4)), P())
    x = jax.device_put(jnp.ones((N, 8, 8, 1)), P("data"))

    def f(k, x):
      k = jax.reshard(k, P(reduced={"data"}))
      return jnp.sum(jax.lax.conv_general_dilated(
          x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))
    try:
      jax.jit(jax.grad(f)).lower(k, x)
      return "no error: the conv rule exists in this JAX"
    except Exception as e:  # pylint: disable=broad-except
      return f"{type(e).__name__}: {str(e).splitlines()[0]}"


def main():
  w = jax.device_put(jnp.full((D_IN, D_OUT), 0.01, jnp.float32),
                     NamedSharding(MESH, P()))
  x = jax.device_put(
      jax.random.normal(jax.random.key(0), (N * K * M, D_IN), jnp.float32),
      NamedSharding(MESH, P("data")))
  print(f"jax {jax.__version__}, {N} devices, K={K}, w {D_IN}x{D_OUT} "
        f"({w.nbytes / 1024:.0f} KiB)")
  expected = None
  for name, fn in (("jit", plain), ("reduced", reduced),
                   ("shard_map", island)):
    step = jax.jit(fn, out_shardings=NamedSharding(MESH, P()))
    compiled = step.lower(w, x).compile()
    text = compiled.as_text()
    run = hlo.executed(text)
    operands = [line.count("f32[") for line in text.splitlines()
                if " all-reduce(" in line]
    new_w = np.asarray(step(w, x))
    expected = new_w if expected is None else expected
    print(f"{name:10s} all-reduce x{run.collectives['all-reduce']} "
          f"(operands {operands}), {run.all_reduce_bytes / 1024:.0f} KiB per "
          f"step, temp {compiled.memory_analysis().temp_size_in_bytes / 1024:.0f}"
          f" KiB, max |dw| vs jit {np.max(np.abs(new_w - expected)):.1e}")
  print("reduced on a conv kernel:", conv_reduced_error())


if __name__ == "__main__":
  main()
