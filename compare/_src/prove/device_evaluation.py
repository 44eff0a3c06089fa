"""A test evaluation each side of a `Port` runs on its own devices.

`Port.evaluate` reads a host state; a program whose evaluation is a
compiled step over a test set split across the devices (a `pmap` of the
metric sums, `psum`'d, and its `shard_map` port) describes it here, and
each run evaluates its own state, in its own layout, on that test batch:
the numbers the program itself reports, and a mistake in the port's
evaluation step fails the proof.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from compare._src.prove.port_steps import PortError


@dataclasses.dataclass(frozen=True)
class DeviceEvaluation:
  """A `Port`'s test evaluation on the devices (`Port.device_evaluation`).

  Attributes:
    batch: the test batch on the host, a dict of numpy arrays with the rows
      leading; split over the devices as the training batches are (its
      rows a multiple of the mesh's devices).
    pmap_step: pmap's evaluation as written, `jax.pmap`'d: `(state, batch)
      -> sums`, the state as pmap's train step takes it, the batch as
      `[devices, rows per device, ...]`, the sums `psum`'d over devices.
    port_step: its port, `(state, batch) -> sums`, the state as the ports
      hold it on the mesh and the batch split over it by rows; every port
      run (`port_step`'s and each of `extra_ports`') evaluates with it.
    summarize: the sums fetched to the host (numpy) -> `{metric: float or
      None}`, the metrics the report shows.
    metrics: those of `summarize`'s metrics the end-of-run check judges
      (a run's pair must agree within the calibration's spread).
    reference_step: the one-device reference's evaluation, `(state, whole
      batch) -> sums`, where the `Port` has a `reference_step`.
  """

  batch: dict
  pmap_step: Callable[[Any, Any], dict]
  port_step: Callable[[Any, Any], dict]
  summarize: Callable[[dict], dict]
  metrics: tuple[str, ...]
  reference_step: Callable[[Any, Any], dict] | None = None


def check(port) -> None:
  """`port.device_evaluation` as described, each mistake one `PortError`
  line naming the field (nothing is traced: the steps run at the end)."""
  device = port.device_evaluation
  if device is None:
    return
  what = "device_evaluation"
  if not isinstance(device, DeviceEvaluation):
    raise PortError(f"{what}: a compare.DeviceEvaluation, got "
                    f"{type(device).__name__}")
  if port.evaluate is not None:
    raise PortError(f"{what}: give it or evaluate, not both (each side "
                    "evaluates one way)")
  for field in ("pmap_step", "port_step", "summarize"):
    if not callable(getattr(device, field)):
      raise PortError(f"{what}.{field} is not callable")
  if (device.reference_step is None) != (port.reference_step is None):
    raise PortError(f"{what}.reference_step: give it exactly where the "
                    "Port has a reference_step (the reference evaluates "
                    "its own state)")
  if not device.metrics or not all(isinstance(m, str)
                                   for m in device.metrics):
    raise PortError(f"{what}.metrics: the judged metrics' names, got "
                    f"{device.metrics!r}")
  rows = {len(np.asarray(x)) for x in device.batch.values()} if isinstance(
      device.batch, dict) and device.batch else set()
  if len(rows) != 1 or next(iter(rows)) % port.mesh.size:
    raise PortError(f"{what}.batch: a dict of arrays with the same rows, "
                    f"a multiple of the mesh's {port.mesh.size} devices "
                    f"(rows: {sorted(rows)})")


def test_size(device: DeviceEvaluation) -> int:
  """The test batch's rows: the accuracy's floor is one of them."""
  return len(np.asarray(next(iter(device.batch.values()))))
