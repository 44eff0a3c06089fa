"""Single-device ground truth: each program on one device, global batch.

Both ports are checked against these, not only against each other, since two
ports can make the same mistake.
"""

from typing import NamedTuple

import jax


class OneDevice(NamedTuple):
  """Where a reference runs: its placement type.

  Attributes:
    device: the one device.
    loss_divisor: the device count being emulated, by which the classic
      loss normalisation divides the global batch's summed loss.
  """

  device: jax.Device
  loss_divisor: int
