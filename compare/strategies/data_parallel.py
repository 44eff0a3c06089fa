"""data_parallel: pmap, shard_map and jit against the single-device reference."""

import dataclasses

from compare.reference import data_parallel as reference
from compare.strategies import RunSpec
from compare.strategies import StrategySpec
from compare.strategies import summarize_sums
from legacy_pmap import data_parallel as legacy
from sharded import data_parallel as port
from workloads import batches
from workloads import configs
from workloads import registry


def make_config(options, data):
  """A `TrainConfig` from CLI options over the workload's defaults.

  Raises:
    batches.BatchError: when the global batch does not divide over the
      devices.
  """
  workload = registry.get(options["workload"])
  fields = {f.name for f in dataclasses.fields(configs.TrainConfig)}
  given = {k: v for k, v in options.items() if k in fields and v is not None}
  config = configs.TrainConfig(
      **{**workload.defaults, **given, "dataset": data.name,
         "input_shape": tuple(data.train_inputs.shape[1:])})
  if config.global_batch % options["devices"]:
    raise batches.BatchError(
        f"batch size {config.global_batch} does not divide over "
        f"{options['devices']} devices")
  return config


def summarize(sums, config):
  """Test loss, and accuracy where the workload classifies."""
  return summarize_sums(sums, registry.get(config.workload).classifies)


SPEC = StrategySpec(
    name="data_parallel",
    runs=(RunSpec("pmap", legacy, "pmap"),
          RunSpec("shard_map", port, "shard_map"),
          RunSpec("jit", port, "jit"),
          RunSpec("reference", reference, "reference")),
    pairs=(("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference"), ("jit", "reference")),
    make_config=make_config,
    summarize=summarize,
)
