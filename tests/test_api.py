"""Both backends (and the reference) expose the same API, name for name."""

import importlib
import inspect
import pathlib

import pytest

from legacy_pmap import devices as legacy_devices
from sharded import devices as port_devices
from shardport import strategies
from shardport.strategies import protocol
from shardport.workloads import batches
from shardport.workloads import configs

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROGRAMS = sorted({spec.program for spec in strategies.STRATEGIES.values()})


def _label(program):
  """A backend module's import name, or a strategy's `Reference` class's."""
  if inspect.isclass(program):
    return f"{program.__module__}.{program.__qualname__}"
  return program.__name__


# Every program a strategy runs, once (accumulation runs the data-parallel
# ones too), by name: the backends' modules and the strategies' references.
RUN_MODULES = {_label(run.module): run.module
               for spec in strategies.STRATEGIES.values() for run in spec.runs}
API = protocol.API


def _public_functions(module):
  return [name for name, value in vars(module).items()
          if inspect.isfunction(value) and not name.startswith("_")
          and value.__module__ == module.__name__]


def test_backends_hold_the_same_modules():
  legacy = sorted(p.name for p in (ROOT / "legacy_pmap").glob("*.py"))
  assert legacy == sorted(p.name for p in (ROOT / "sharded").glob("*.py"))
  assert "data_parallel" in PROGRAMS
  # Every program module in the backends is some strategy's program.
  files = {p.stem for p in (ROOT / "sharded").glob("*.py")}
  assert files - {"__init__", "devices", "train"} == set(PROGRAMS)


@pytest.mark.parametrize("program", PROGRAMS)
def test_same_public_functions_in_the_same_order(program):
  legacy = importlib.import_module(f"legacy_pmap.{program}")
  sharded = importlib.import_module(f"sharded.{program}")
  assert _public_functions(legacy) == _public_functions(sharded)


@pytest.mark.parametrize("name", sorted(RUN_MODULES))
def test_module_satisfies_the_protocol(name):
  module = RUN_MODULES[name]
  for attribute in API:
    assert hasattr(module, attribute), f"{name} lacks {attribute}"
    if attribute in protocol.StrategyModule.__annotations__:
      continue
    expected = inspect.signature(getattr(protocol.StrategyModule, attribute))
    params = [p for p in expected.parameters if p != "self"]
    actual = list(inspect.signature(getattr(module, attribute)).parameters)
    assert actual == params, f"{name}.{attribute}"


def test_every_run_names_a_variant_of_its_module():
  for spec in strategies.STRATEGIES.values():
    for run in spec.runs:
      assert run.variant in run.module.VARIANTS, (spec.name, run.name)


def test_devices_modules_match():
  assert _public_functions(legacy_devices) == _public_functions(port_devices)
  for name in _public_functions(legacy_devices):
    # Parameter names must match; return annotations differ by design
    # (a device list against a Mesh).
    assert (list(inspect.signature(getattr(legacy_devices, name)).parameters)
            == list(inspect.signature(getattr(port_devices, name)).parameters)
            ), name


def test_input_errors_are_value_errors():
  # What the CLIs turn into one line on stderr and exit 2.
  for error in (configs.EnsembleSizeError, configs.DeviceError,
                batches.MicrobatchError):
    assert issubclass(error, ValueError), error
