"""accumulation: data-parallel training with K microbatches per step."""

import dataclasses

import jax

from shardport.training.programs.base import Program
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


class AccumulationProgram(Program):
  """Data-parallel training with K microbatches accumulated per step."""

  name = "accumulation"
  program = "accumulation"
  config_class = configs.AccumulationConfig
  workloads = ("cnn", "linear512", "linreg")
  defaults = {"steps": 200, "global_batch": 128, "learning_rate": 0.004}

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
