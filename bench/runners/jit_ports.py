"""The jit ports, before and after a fix, beside shard_map's.

    python -m bench.runners.jit_ports --json docs/measured/jit_ports.json

(or `python -m docs.build_guide --measure jit_ports`). For each strategy
with a jit port, its sharded module's steps on 8 emulated CPU devices, from
the same state on the same batch of digits at the strategy's defaults
(`RUNS`): `shard_map`, the jit port before a fix where one was needed, and
after it (and, for the ensembles, the einsum convolution tried between: its
forward pass rounds otherwise, and its ReLU flips pass the lockstep verdict
only by its nudged retakes). The "after" runs are the jit runs the strategies
prove. accumulation's jit port has no "before" here (its fix is measured in
its own report): it is measured so that one run holds all five programs'
jit ports against shard_map (issue 32's bar: 0.9x its examples/s, at most
1.1x its collective bytes). Each run's compile time, its
collectives and their bytes per step (`compare._src.measure.hlo`), and examples/s
window by window, the runs interleaved so that a window's ratio cancels the
machine's drift; every step is waited for (queued collective steps can
deadlock emulated CPU devices, docs/jax-facts.md). The equivalence of the
ports is proved by `python -m compare`, not here.
"""

import argparse
import importlib
import os
import statistics
import sys
import time

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from bench.runners import run_record  # pylint: disable=g-import-not-at-top,wrong-import-position
from compare._src.measure import hlo  # pylint: disable=g-import-not-at-top,wrong-import-position
from shardport.strategies import accumulation  # pylint: disable=g-import-not-at-top,wrong-import-position
from shardport.workloads import configs  # pylint: disable=g-import-not-at-top,wrong-import-position
from shardport.workloads import datasets  # pylint: disable=g-import-not-at-top,wrong-import-position

# strategy -> (its sharded module, (the jit port before its fix or None,
# after, and any tried between), its config).
_DEFAULT = {"global_batch": 128, "learning_rate": 0.004}
RUNS = {
    "ensemble": ("sharded.ensemble",
                 ("jit_grouped_conv", "jit_member_conv", "jit_einsum_conv"),
                 lambda shape: configs.EnsembleConfig(
                     members=8, global_batch=128, input_shape=shape)),
    "ensemble_data": ("sharded.ensemble_data",
                      ("jit", "jit_member_conv", "jit_einsum_conv"),
                      lambda shape: configs.EnsembleDataConfig(
                          members=2, global_batch=128, input_shape=shape)),
    "fsdp": ("sharded.fsdp", ("jit_unconstrained", "jit"),
             lambda shape: configs.TrainConfig(**_DEFAULT, input_shape=shape)),
    "data_parallel": ("sharded.data_parallel", ("jit_plain", "jit"),
                      lambda shape: configs.TrainConfig(
                          **_DEFAULT, input_shape=shape)),
    # The microbatch loop the strategy's `auto` picks on this platform.
    "accumulation": ("sharded.accumulation", (None, "jit"),
                     lambda shape: configs.AccumulationConfig(
                         **_DEFAULT, input_shape=shape,
                         accum_loop=accumulation.resolve_loop(
                             "auto", jax.devices()[0].platform))),
}


def _runs(strategy, n_devices):
  """`variant -> (step, state, batch)`, every run from the same numbers."""
  module_name, variants, make_config = RUNS[strategy]
  module = importlib.import_module(module_name)
  data = datasets.load("digits")
  config = make_config(tuple(data.train_inputs.shape[1:]))
  batch = {"inputs": data.train_inputs[:config.global_batch],
           "targets": data.train_targets[:config.global_batch]}
  placement = module.make_placement(n_devices)
  return {variant: (module.make_train_step(config, placement, variant),
                    module.create_state(0, config, placement),
                    module.put_batch(batch, placement))
          for variant in ("shard_map", *variants) if variant}, config


def _window(step, state, batch, steps):
  start = time.perf_counter()
  for _ in range(steps):
    state, metrics = step(state, batch)
    jax.block_until_ready((state, metrics))
  return state, (time.perf_counter() - start) / steps


def measure(strategy, windows, steps, n_devices=8):
  """One strategy's runs: compile, collectives, examples/s per window."""
  runs, config = _runs(strategy, n_devices)
  out, states = {}, {}
  for variant, (step, state, batch) in runs.items():
    start = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    described = hlo.describe(compiled)
    states[variant], _ = _window(step, state, batch, 2)  # warm-up
    out[variant] = {
        "compile_s": compile_s,
        "collectives_per_step": described["collectives_per_step_executed"],
        "collective_bytes_per_step": described["collective_bytes_per_step"],
        "window_examples_per_s": []}
  for _ in range(windows):
    for variant, (step, _, batch) in runs.items():
      states[variant], seconds = _window(step, states[variant], batch, steps)
      out[variant]["window_examples_per_s"].append(
          config.global_batch / seconds)
  shard_map = out["shard_map"]
  for variant, run in out.items():
    rates = run["window_examples_per_s"]
    run["examples_per_s"] = statistics.median(rates)
    run["examples_per_s_spread"] = [min(rates), max(rates)]
    run["vs_shard_map"] = statistics.median(
        a / b for a, b in zip(rates, shard_map["window_examples_per_s"]))
    run["collective_bytes_vs_shard_map"] = (
        sum(run["collective_bytes_per_step"].values()) /
        max(1, sum(shard_map["collective_bytes_per_step"].values())))
  before, after = RUNS[strategy][1][:2]
  return {"global_batch": config.global_batch, "before": before,
          "after": after, "runs": out}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--json", help="write the measurement here")
  parser.add_argument("--strategies", nargs="+", default=tuple(RUNS),
                      choices=tuple(RUNS))
  parser.add_argument("--windows", type=int, default=15)
  parser.add_argument("--steps", type=int, default=30,
                      help="steps per window")
  args = parser.parse_args(argv)
  load = os.getloadavg()[0]
  measured = {s: measure(s, args.windows, args.steps)
              for s in args.strategies}
  for strategy, entry in measured.items():
    for variant, run in entry["runs"].items():
      low, high = run["examples_per_s_spread"]
      print(f"{strategy:<14} {variant:<18} {run['examples_per_s']:9.0f} "
            f"examples/s ({low:.0f}-{high:.0f}), {run['vs_shard_map']:.2f}x "
            f"shard_map; {sum(run['collective_bytes_per_step'].values()):,} "
            f"collective bytes a step "
            f"({run['collective_bytes_vs_shard_map']:.2f}x); compile "
            f"{run['compile_s']:.1f} s")
  if args.json:
    run_record.write(
        args.json, "jit_ports",
        "the CNN on digits, 8 emulated CPU devices, the strategies' default "
        "batch; median of windows, runs interleaved",
        devices=jax.device_count(), windows=args.windows,
        steps_per_window=args.steps,
        load_average_before=round(load, 2), strategies=measured)
  return 0


if __name__ == "__main__":
  sys.exit(main())
