"""Proves a port from pmap computes the same numbers as the program it
replaces, and times both.

For a team's own program: describe it once as a `Port` and call `prove`
(or `python -m compare --program PKG.MODULE:NAME`, or
`compare.testing.assert_port_equivalent` in CI); `adapt_step` plugs in a
step of another signature (the pmap tutorial's `update(params, xs, ys)`).
The conversions between pmap's layouts and a mesh's are here too
(`replicate`, `split_batch`, `device_key`, ...), and a pmap program's
checkpoint restored into its port's state (`from_pmap_checkpoint`).
`compare.checks` compares two states and counts a compiled step's
collectives, as `prove` does.

For our own programs: `python -m compare --strategy data_parallel|ensemble|
accumulation`, through the same `prove`. Every strategy's runs (pmap, the
shard_map and jit ports, the one-device reference) train from the same state
on the same batches. The engine is private (`compare._src`): its `runner`
records them, `verdicts` judges them against their tolerances and a
calibration, `timing`, `hlo` and `utilisation` measure them, `report` and
`plots` show them. The pytest plugin is `compare.pytest_plugin`.

The public names load on first use, so that `import compare` (e.g. by the
pytest plugin) imports no jax before the emulated device count is set.
"""

import importlib
import typing

if typing.TYPE_CHECKING:  # the names, for type checkers and the guide
  from compare._src.prove.adapt import adapt_step
  from compare.conversions import device_key
  from compare.conversions import replicate
  from compare.conversions import shard_batch
  from compare.conversions import split_batch
  from compare.conversions import stacked_to_mesh
  from compare.conversions import to_devices
  from compare.conversions import to_mesh
  from compare.conversions import unreplicate
  from compare.pmap_checkpoints import from_pmap_checkpoint
  from compare._src.prove.baseline import Baseline
  from compare._src.prove.device_evaluation import DeviceEvaluation
  from compare._src.prove.port import Port
  from compare._src.prove.port import PortError
  from compare._src.prove.proof import Proof
  from compare._src.prove.proof import prove
  from compare._src.prove.run_fields import StateView

# Public name -> the module that defines it.
_PUBLIC = {
    "Port": "compare._src.prove.port",
    "DeviceEvaluation": "compare._src.prove.device_evaluation",
    "Baseline": "compare._src.prove.baseline",
    "StateView": "compare._src.prove.run_fields",
    "adapt_step": "compare._src.prove.adapt",
    "PortError": "compare._src.prove.port",
    "Proof": "compare._src.prove.proof",
    "prove": "compare._src.prove.proof",
    "replicate": "compare.conversions",
    "unreplicate": "compare.conversions",
    "split_batch": "compare.conversions",
    "to_mesh": "compare.conversions",
    "shard_batch": "compare.conversions",
    "stacked_to_mesh": "compare.conversions",
    "to_devices": "compare.conversions",
    "device_key": "compare.conversions",
    "from_pmap_checkpoint": "compare.pmap_checkpoints",
}

__all__ = [*_PUBLIC, "checks", "testing"]


def __getattr__(name):
  if name in ("checks", "testing"):
    return importlib.import_module(f"compare.{name}")
  if name in _PUBLIC:
    return getattr(importlib.import_module(_PUBLIC[name]), name)
  raise AttributeError(f"module 'compare' has no attribute {name!r}")


def __dir__():
  return sorted(__all__)
