"""Measures the ensemble step four ways; the numbers in docs/ensemble-notes.md.

    python -m bench.probes.ensemble [--members 8] [--steps 55] [--windows 7]

Runs pmap (when members == devices), the shard_map port, shard_map with the
members vmapped inside each shard, and plain `jit(vmap(...))` over member
params sharded `P('ensemble')` on an Auto mesh, each from the same init over
the same batches as the per-member reference. Prints the collectives in each
compiled step, the largest parameter difference from the reference (relative
to each leaf's largest value) per epoch, and ms per step timed interleaved,
waiting for every step (queued collective steps can deadlock XLA:CPU's
emulated devices). A measurement, not a test: nothing here asserts.
"""

import argparse
import os
import statistics
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8")

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax
from jax import lax
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from compare._src.measure import hlo
from shardport.strategies.ensemble import Reference as reference
from legacy_pmap import ensemble as legacy
from sharded import ensemble as port
from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import datasets
from shardport.workloads import ensemble
# pylint: enable=g-import-not-at-top,wrong-import-position

MEMBERS, REPLICATED = P("ensemble"), P()


def member_step(state, batch):
  (loss, logits), grads = jax.value_and_grad(ensemble.loss_fn, has_aux=True)(
      state.params, batch)
  return state.apply_gradients(grads=grads), loss, jax.nn.softmax(logits)


def vmapped_step(axis_name):
  """All members under one vmap; the probabilities' mean is pmean'd if named."""
  def step(state, batch):
    state, loss, probs = jax.vmap(member_step, in_axes=(0, None))(state, batch)
    probs = probs.mean(0)
    if axis_name:
      probs = lax.pmean(probs, axis_name)
    return state, {"member_loss": loss,
                   "accuracy": ensemble.accuracy(probs, batch["targets"])}
  return step


def build(config, mesh):
  """`{name: (module, placement, step)}` for every way that fits `config`."""
  runs = {}
  if config.members == 8:
    devices = legacy.make_placement(8)
    runs["pmap"] = (legacy, devices, legacy.make_train_step(config, devices))
  runs["shard_map"] = (port, mesh, port.make_train_step(config, mesh))
  runs["shard_map_vmap"] = (port, mesh, jax.jit(jax.shard_map(
      vmapped_step("ensemble"), mesh=mesh, in_specs=(MEMBERS, REPLICATED),
      out_specs=(MEMBERS, {"member_loss": MEMBERS, "accuracy": REPLICATED})),
                                                   donate_argnums=0))
  runs["jit_vmap"] = (port, mesh, jax.jit(vmapped_step(None),
                                          donate_argnums=0))
  device = reference.make_placement(8)
  runs["reference"] = (reference, device,
                       reference.make_train_step(config, device))
  return runs


def relative_difference(a, b):
  return max(float(np.abs(np.asarray(x, np.float64) - y).max() /
                   max(np.abs(y).max(), 1e-30))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def explicit_mesh_outcome(config, mesh, batch):
  """What `jit(vmap(...))` does on an Explicit mesh: the error's first line."""
  explicit = jax.make_mesh((8,), ("ensemble",),
                           axis_types=(AxisType.Explicit,))
  state = jax.device_put(jax.device_get(port.create_state(0, config, mesh)),
                         NamedSharding(explicit, MEMBERS))
  batch = jax.device_put(batch, NamedSharding(explicit, REPLICATED))
  try:
    with jax.set_mesh(explicit):
      jax.jit(vmapped_step(None)).lower(state, batch).compile()
    return "compiled"
  except Exception as err:  # pylint: disable=broad-except
    return f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--members", type=int, default=8)
  parser.add_argument("--steps", type=int, default=55)
  parser.add_argument("--windows", type=int, default=7)
  args = parser.parse_args()
  data = datasets.load("digits")
  config = configs.EnsembleConfig(members=args.members, steps=args.steps,
                                  input_shape=(8, 8, 1))
  mesh = port.make_placement(8)
  host_batches = list(batches.train_batches(data, config.seed,
                                            config.global_batch, args.steps))
  print(f"jax {jax.__version__}, {args.members} members on 8 emulated CPU "
        f"devices, batch {config.global_batch}, {args.steps} steps")
  runs, states, trajectories = build(config, mesh), {}, {}
  for name, (module, placement, step) in runs.items():
    state = module.create_state(config.seed, config, placement)
    first = module.put_batch(host_batches[0], placement)
    start = time.perf_counter()
    compiled = step.lower(state, first).compile()
    seconds = time.perf_counter() - start
    counts = {k: v for k, v in hlo.count_collectives(compiled.as_text()).items()
              if v}
    print(f"{name:15s} compile {seconds:5.2f} s, collectives {counts}")
    trajectories[name] = []
    for host_batch in host_batches:
      state, _ = compiled(state, module.put_batch(host_batch, placement))
      trajectories[name].append(module.to_host(state))
    runs[name] = (module, placement, compiled)
    states[name] = state
  every = len(data.train_inputs) // config.global_batch
  for name, trajectory in trajectories.items():
    if name != "reference":
      diffs = [relative_difference(trajectory[i], trajectories["reference"][i])
               for i in [0, *range(every - 1, args.steps, every)]]
      print(f"{name:15s} vs reference (step 1, then each epoch): " +
            " ".join(f"{d:.1e}" for d in diffs))
  placed = {name: [module.put_batch(b, placement) for b in host_batches[:4]]
            for name, (module, placement, _) in runs.items()}
  seconds = {name: [] for name in runs}
  for w in range(args.windows + 1):
    names = list(runs)[w % len(runs):] + list(runs)[:w % len(runs)]
    for name in names:
      steps = 3 if name == "jit_vmap" else 20
      start = time.perf_counter()
      for i in range(steps):
        states[name], _ = runs[name][2](states[name], placed[name][i % 4])
        jax.block_until_ready(states[name])
      if w:  # the first window warms up
        seconds[name].append((time.perf_counter() - start) / steps)
  base = statistics.median(seconds["shard_map"])
  for name, values in seconds.items():
    median = statistics.median(values)
    print(f"{name:15s} {median * 1e3:8.1f} ms/step (min {min(values) * 1e3:.1f}"
          f", max {max(values) * 1e3:.1f}), {median / base:5.2f}x shard_map")
  print("jit(vmap) on an Explicit mesh:",
        explicit_mesh_outcome(config, mesh, host_batches[0]))


if __name__ == "__main__":
  main()
