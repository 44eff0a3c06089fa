"""Both backends (and the reference) expose the same API, name for name."""

import importlib
import inspect
import pathlib

import pytest

from compare import protocol

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROGRAMS = sorted(p.stem for p in (ROOT / "sharded").glob("*.py")
                  if p.stem not in ("__init__", "devices", "train"))
API = [name for name in vars(protocol.StrategyModule)
       if not name.startswith("_")]


def _public_functions(module):
  return [name for name, value in vars(module).items()
          if inspect.isfunction(value) and not name.startswith("_")
          and value.__module__ == module.__name__]


def test_backends_hold_the_same_modules():
  legacy = sorted(p.name for p in (ROOT / "legacy_pmap").glob("*.py"))
  assert legacy == sorted(p.name for p in (ROOT / "sharded").glob("*.py"))
  assert "data_parallel" in PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS)
def test_same_public_functions_in_the_same_order(program):
  legacy = importlib.import_module(f"legacy_pmap.{program}")
  sharded = importlib.import_module(f"sharded.{program}")
  assert _public_functions(legacy) == _public_functions(sharded)


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("backend", ["legacy_pmap", "sharded",
                                     "compare.reference"])
def test_module_satisfies_the_protocol(program, backend):
  module = importlib.import_module(f"{backend}.{program}")
  for name in API:
    assert hasattr(module, name), f"{backend}.{program} lacks {name}"
    if name == "VARIANTS":
      continue
    expected = inspect.signature(getattr(protocol.StrategyModule, name))
    params = [p for p in expected.parameters if p != "self"]
    actual = list(inspect.signature(getattr(module, name)).parameters)
    assert actual == params, f"{backend}.{program}.{name}"


def test_devices_modules_match():
  legacy = importlib.import_module("legacy_pmap.devices")
  sharded = importlib.import_module("sharded.devices")
  assert _public_functions(legacy) == _public_functions(sharded)
  for name in _public_functions(legacy):
    # Parameter names must match; return annotations differ by design
    # (a device list against a Mesh).
    assert (list(inspect.signature(getattr(legacy, name)).parameters) ==
            list(inspect.signature(getattr(sharded, name)).parameters)), name
