"""accumulation: pmap, shard_map and jit with K microbatches per step.

Beside the reference (one device, the global batch, no accumulation) the
plain data-parallel steps run on the same devices: with `--accum-steps 1`
each accumulation port must equal its data-parallel twin bitwise, and with
K > 1 their memory is the full-batch baseline on the same devices.
"""

import dataclasses

import jax

from compare.reference import accumulation as reference
from compare.strategies import RunSpec
from compare.strategies import StrategySpec
from compare.strategies import summarize_sums
from legacy_pmap import accumulation as legacy
from legacy_pmap import data_parallel as legacy_dp
from sharded import accumulation as port
from sharded import data_parallel as port_dp
from workloads import configs
from workloads import microbatches
from workloads import registry


def make_config(options, data):
  """An `AccumulationConfig` from CLI options over the workload's defaults."""
  workload = registry.get(options["workload"])
  fields = {f.name for f in dataclasses.fields(configs.AccumulationConfig)}
  given = {k: v for k, v in options.items() if k in fields and v is not None}
  return configs.AccumulationConfig(
      **{**workload.defaults, **given, "dataset": data.name,
         "input_shape": tuple(data.train_inputs.shape[1:])})


def summarize(sums, config):
  """Test loss, and accuracy where the workload classifies."""
  return summarize_sums(sums, registry.get(config.workload).classifies)


def extra_report(config):
  """K, and the loop each accumulation run uses (`auto` resolved).

  Under `multisteps` one optimiser step is K calls of the compiled step:
  its HLO's collective count is per call, K per optimiser step.
  """
  loop = microbatches.resolve_loop(config.accum_loop,
                                   jax.devices()[0].platform)
  return {"accum_steps": config.accum_steps, "accum_loop": loop,
          "calls_per_step": (config.accum_steps if loop == "multisteps"
                             else 1)}


def run_fields(config, name):
  """Each run's microbatch loop; None for the runs that do not accumulate."""
  if name not in ("pmap", "shard_map", "jit"):
    return {"accum_loop": None}
  return {"accum_loop": microbatches.resolve_loop(
      config.accum_loop, jax.devices()[0].platform)}


SPEC = StrategySpec(
    name="accumulation",
    runs=(RunSpec("pmap", legacy, "pmap"),
          RunSpec("shard_map", port, "shard_map"),
          RunSpec("jit", port, "jit"),
          RunSpec("dp_pmap", legacy_dp, "pmap"),
          RunSpec("dp_shard_map", port_dp, "shard_map"),
          RunSpec("reference", reference, "reference")),
    pairs=(("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference"), ("jit", "reference"),
           ("pmap", "dp_pmap"), ("shard_map", "dp_shard_map")),
    make_config=make_config,
    summarize=summarize,
    extra_report=extra_report,
    run_fields=run_fields,
)
