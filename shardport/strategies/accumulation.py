"""accumulation: data-parallel training with K microbatches per step.

pmap (`legacy_pmap.accumulation`), shard_map and jit (`sharded.accumulation`)
against the reference: one device, the global batch, no accumulation (the
data-parallel one). Beside it the plain data-parallel steps run on the same
devices: with `--accum-steps 1` each accumulation port must equal its
data-parallel twin bitwise, and with K > 1 their memory is the full-batch
baseline on the same devices.
"""

import dataclasses

import jax

from shardport.strategies import data_parallel
from shardport.strategies.data_parallel import COMMON_CONTROLS
from shardport.strategies.data_parallel import FINAL
from shardport.strategies.strategy import RunSpec
from shardport.strategies.strategy import Strategy
from shardport.strategies.tolerances import Tolerance
from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import microbatches

# What `auto` picks, from the measurements in docs/accumulation-notes.md.
# XLA:CPU runs the conv backward inside a rolled loop (scan, fori) on a slow
# path, 3-6x slower than unrolled code, so CPU unrolls; it then schedules the
# K microbatches side by side, which saves little memory: pass `scan` where
# memory is the point. Accelerators keep the rolled scan, the classic advice
# (not measured here): one copy of the step in the program whatever K, and
# one microbatch's activations live at a time.
AUTO = {"cpu": "scan_unroll", "gpu": "scan", "tpu": "scan"}
# The runs whose step takes one microbatch per call (`calls_per_step`).
ACCUMULATING_RUNS = (None, "pmap", "shard_map", "jit")


def resolve_loop(loop: str, platform: str) -> str:
  """`loop`, with `auto` replaced by the choice for `platform`."""
  if loop == "auto":
    return AUTO.get(platform, "scan")
  microbatches.check_loop(loop)
  return loop


# The ground truth takes no microbatches and does not accumulate: the
# data-parallel loss normalisation (sum / n_devices for the CNN) on the whole
# global batch, `config.accum_steps` and `config.accum_loop` ignored.
# Accumulating K equal microbatches averages K gradients that each stand for
# 1/K of a shard, so it must land there up to summation order (mean-of-means
# semantics). The state is the workload's own (never optax.MultiSteps-
# wrapped): the ports' `to_host` unwrap theirs to this layout.
Reference = data_parallel.Reference


class Accumulation(Strategy):
  """Data-parallel training with K microbatches accumulated per step."""

  name = "accumulation"
  program = "accumulation"
  rank = 2
  config_class = configs.AccumulationConfig
  workloads = ("cnn", "linear512", "linreg")
  defaults = {"steps": 200, "global_batch": 128, "learning_rate": 0.004}
  runs = (RunSpec("pmap", "legacy_pmap.accumulation", "pmap"),
          RunSpec("shard_map", "sharded.accumulation", "shard_map"),
          RunSpec("jit", "sharded.accumulation", "jit"),
          RunSpec("dp_pmap", "legacy_pmap.data_parallel", "pmap"),
          RunSpec("dp_shard_map", "sharded.data_parallel", "shard_map"),
          RunSpec("reference", Reference, "reference"))
  pairs = (("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference"), ("jit", "reference"),
           ("pmap", "dp_pmap"), ("shard_map", "dp_shard_map"))
  tolerances = {
      "first_step": Tolerance(rtol=1e-5, atol=1e-5, reason=(
          "K microbatch gradients averaged against one full-batch gradient: "
          "only the summation order differs (no method is bit-exact). "
          "Measured at most 7.7e-7 of max|leaf| after one step (K in 1, 2, "
          "4; 1, 2, 8 devices), so 1e-5 as for data_parallel. K=1 against "
          "the plain data-parallel step is bitwise by construction (the "
          "first microbatch starts the running sum).")),
      "final": FINAL,
  }
  negative_controls = COMMON_CONTROLS

  def make_config(self, options, data):
    """The config, with `auto` resolved to this platform's loop."""
    config = super().make_config(options, data)
    loop = resolve_loop(config.accum_loop, jax.devices()[0].platform)
    return dataclasses.replace(config, accum_loop=loop)

  def check_layout(self, config, n_devices, n_processes):
    """The batch must split into devices x K microbatches; multisteps needs
    an optax optimiser."""
    super().check_layout(config, n_devices, n_processes)
    batches.microbatch_size(config.global_batch, n_devices * n_processes,
                            config.accum_steps)
    microbatches.check_loop(config.accum_loop)
    microbatches.check_workload(config)

  def calls_per_step(self, config, run=None):
    """Under multisteps an optimiser step is K calls, one microbatch each.

    The reference and the plain data-parallel runs take whole steps.
    """
    if run not in ACCUMULATING_RUNS:
      return 1
    return microbatches.calls_per_step(config)

  def report_fields(self, config):
    """K, the loop, and the calls that make one optimiser step."""
    return {"accum_steps": config.accum_steps,
            "accum_loop": config.accum_loop,
            "calls_per_step": self.calls_per_step(config)}

  def run_fields(self, config, name):
    """Each run's microbatch loop; None for the runs that do not accumulate."""
    accumulates = name in ACCUMULATING_RUNS
    return {"accum_loop": config.accum_loop if accumulates else None}

  def report_lines(self, report):
    """Accumulation's point: its temp memory against the full-batch steps."""
    runs = report["runs"]
    temp = lambda name: runs[name].get("memory", {}).get("temp_bytes")
    lines = []
    for name in ("pmap", "shard_map", "jit"):
      if name not in runs or "reference" not in runs or not temp(name):
        continue
      same = f"dp_{name}" if f"dp_{name}" in runs else None
      lines.append(
          f"temp memory {name} (K={report['accum_steps']}, "
          f"{runs[name]['accum_loop']}): "
          f"{temp(name) / temp('reference'):.2f}x the one-device full batch"
          + (f", {temp(name) / temp(same):.2f}x the data-parallel step on "
             "the same devices" if same else ""))
    return lines


STRATEGY = Accumulation()
