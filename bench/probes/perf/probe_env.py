"""What every probe under bench/probes/perf/ does before it imports jax.

The probes run as modules from the repository root (`python -m
bench.probes.perf.NAME`), so the repository's packages import as they are.
"""


def emulate(devices: int) -> None:
  """Emulates `devices` CPU devices (before anything imports jax)."""
  from shardport.launch import emulation  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  emulation.set_cpu_device_count(devices)


def cnn_fields(dataset: str, batch: int):
  """The dataset and the CNN's config fields the probes train with."""
  from shardport.workloads import datasets, registry  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  data = datasets.load(dataset)
  base = dict(workload="cnn", dataset=dataset, global_batch=batch,
              input_shape=data.train_inputs.shape[1:])
  base.update(registry.get("cnn").defaults)
  base["global_batch"] = batch
  return data, base
