"""Measures the microbatch loops: throughput, compile time, memory, collectives.

Writes the markdown table of docs/accumulation-notes.md to stdout:

  python -m bench.probes.accumulation --devices 8 --batch 256 --accum-steps 4

Every loop of `shardport.workloads.microbatches.LOOPS` runs under pmap, shard_map and
jit, beside the plain data-parallel step (K=1 without a loop, the "full
batch" on the same devices) and the one-device reference, timed interleaved
(A B C ... A B C ...) over several windows; the median and the spread of
optimiser steps per second are reported. Under `multisteps` one optimiser
step is K calls.
"""

import argparse
import os
import sys
import time


def _parse():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--devices", type=int, default=8)
  parser.add_argument("--batch", type=int, default=256)
  parser.add_argument("--accum-steps", type=int, default=4)
  parser.add_argument("--workload", default="cnn")
  parser.add_argument("--dataset", default="digits")
  parser.add_argument("--loops", default="scan,scan_unroll,fori,python,"
                      "multisteps")
  parser.add_argument("--windows", type=int, default=5)
  parser.add_argument("--steps-per-window", type=int, default=3)
  return parser.parse_args()


ARGS = _parse()
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           f" --xla_force_host_platform_device_count="
                           f"{ARGS.devices}")

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax
import numpy as np

from compare._src.measure import hlo
from shardport.strategies.accumulation import Reference as reference
from legacy_pmap import accumulation as legacy
from legacy_pmap import data_parallel as legacy_dp
from sharded import accumulation as sharded
from sharded import data_parallel as sharded_dp
from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import datasets
from shardport.workloads import registry
from shardport.workloads import microbatches
# pylint: enable=g-import-not-at-top,wrong-import-position


def _run(name, module, variant, config):
  placement = module.make_placement(ARGS.devices)
  state = module.create_state(config.seed, config, placement)
  data = datasets.load(config.dataset)
  host_batch = next(batches.train_batches(data, config.seed,
                                          config.global_batch, 1))
  batch = module.put_batch(host_batch, placement)
  step = module.make_train_step(config, placement, variant)
  start = time.perf_counter()
  compiled = step.lower(state, batch).compile()
  compile_s = time.perf_counter() - start
  calls = (microbatches.calls_per_step(config)
           if hasattr(config, "accum_loop") else 1)
  memory = compiled.memory_analysis()
  for _ in range(2):  # pmap compiles again for its own output's sharding
    state, _ = step(state, batch)
  jax.block_until_ready(state)
  return {"name": name, "step": step, "state": state, "batch": batch,
          "compile_s": compile_s, "rates": [],
          "all_reduce": hlo.collectives_executed(compiled.as_text())[
              "all-reduce"] * calls,
          "temp": memory.temp_size_in_bytes,
          "argument": memory.argument_size_in_bytes,
          "output": memory.output_size_in_bytes,
          "alias": memory.alias_size_in_bytes}


def _time(run):
  start = time.perf_counter()
  for _ in range(ARGS.steps_per_window):
    run["state"], _ = run["step"](run["state"], run["batch"])
  jax.block_until_ready(run["state"])
  run["rates"].append(ARGS.steps_per_window / (time.perf_counter() - start))


def main():
  input_shape = datasets.load(ARGS.dataset).train_inputs.shape[1:]
  base = dict(workload=ARGS.workload, dataset=ARGS.dataset,
              global_batch=ARGS.batch, input_shape=input_shape)
  base.update(registry.get(ARGS.workload).defaults)
  base["global_batch"] = ARGS.batch
  plain = configs.TrainConfig(**base)
  runs = [_run("reference (1 device, full batch)", reference, "reference",
               configs.AccumulationConfig(**base)),
          _run("data_parallel pmap (K=1, no loop)", legacy_dp, "pmap", plain),
          _run("data_parallel shard_map (K=1, no loop)", sharded_dp,
               "shard_map", plain),
          _run("data_parallel jit (K=1, no loop)", sharded_dp, "jit", plain)]
  for loop in ARGS.loops.split(","):
    config = configs.AccumulationConfig(**base, accum_steps=ARGS.accum_steps,
                                        accum_loop=loop)
    for module, variant in ((legacy, "pmap"), (sharded, "shard_map"),
                            (sharded, "jit")):
      runs.append(_run(f"{loop} {variant}", module, variant, config))
      print(f"compiled {runs[-1]['name']}", file=sys.stderr)
  for window in range(ARGS.windows):
    for run in runs:
      _time(run)
    print(f"window {window + 1}/{ARGS.windows}", file=sys.stderr)
  full = runs[2]["temp"]
  print(f"jax {jax.__version__}, {jax.default_backend()}, {ARGS.devices} "
        f"devices, {ARGS.workload} on {ARGS.dataset}, global batch "
        f"{ARGS.batch}, K={ARGS.accum_steps}\n")
  print("| run | steps/s median | spread | examples/s | compile s | "
        "all-reduces / step | temp KiB | temp / full batch | argument KiB "
        "| output KiB | alias KiB |")
  print("|" + " --- |" * 11)
  for run in runs:
    rates = np.array(run["rates"])
    median = float(np.median(rates))
    print(f"| {run['name']} | {median:.2f} | {rates.min():.2f}-"
          f"{rates.max():.2f} | {median * ARGS.batch:.0f} | "
          f"{run['compile_s']:.2f} | {run['all_reduce']} | "
          f"{run['temp'] / 1024:.0f} | {run['temp'] / full:.2f} | "
          f"{run['argument'] / 1024:.0f} | {run['output'] / 1024:.0f} | "
          f"{run['alias'] / 1024:.0f} |")


if __name__ == "__main__":
  main()
