"""What every probe under docs/perf/ does before it imports jax.

The probes run as scripts (`python docs/perf/NAME.py`), so this folder is on
the path and the repository root is not.
"""

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def emulate(devices: int) -> None:
  """Puts the repository on the path and emulates `devices` CPU devices."""
  if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
  from compare import emulation  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  emulation.set_cpu_device_count(devices)


def cnn_fields(dataset: str, batch: int):
  """The dataset and the CNN's config fields the probes train with."""
  from workloads import datasets, registry  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  data = datasets.load(dataset)
  base = dict(workload="cnn", dataset=dataset, global_batch=batch,
              input_shape=data.train_inputs.shape[1:])
  base.update(registry.get("cnn").defaults)
  base["global_batch"] = batch
  return data, base
