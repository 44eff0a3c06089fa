"""Both backends (and the reference) expose the same API, name for name."""

import importlib
import inspect
import pathlib

import jax
import pytest

from legacy_pmap import devices as legacy_devices
from sharded import devices as port_devices
from shardport import strategies
from shardport.strategies import protocol
from shardport.workloads import batches
from shardport.workloads import configs
from shardport.workloads import datasets
from shardport.workloads import digest
from shardport.workloads import registry
from tests import helpers

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


# Small configs (tests/test_switch.py's), two steps.
_ROUND_TRIP = {"data_parallel": {"workload": "linear512"},
               "accumulation": {"workload": "linear512", "accum_steps": 2},
               "fsdp": {"workload": "linear512"},
               "ensemble": {"workload": "cnn", "members": 8},
               "ensemble_data": {"workload": "cnn", "members": 2}}


@pytest.mark.parametrize("strategy", sorted(_ROUND_TRIP))
def test_every_run_places_its_own_view_after_steps(strategy):
  """The engine's one placement (`compare._src.prove.placement.place`) is each
  run's `from_host`: our programs' canonical view, after 2 optimiser steps,
  placed through their checkpoint layout and read back bit for bit, the
  step counter included (a `from_host` that drops the step, a field, or a
  member's order fails here)."""
  spec = strategies.get(strategy)
  options = {"steps": 2, "global_batch": 32, **_ROUND_TRIP[strategy]}
  data = datasets.load(registry.get(options["workload"]).dataset)
  config = spec.make_config(options, data)
  active = spec.active_runs(config, 8)
  seen = set()  # `from_host` is the module's: one run of each
  for run in spec.runs:
    if (run.name == spec.truth or run.name not in active
        or run.module in seen):
      continue  # the truth's state is the shared one, never placed
    module = run.module
    seen.add(module)
    calls = spec.calls_per_step(config, run.name)
    placement = module.make_placement(8)
    initial = module.create_state(config.seed, config, placement)
    like = jax.tree.map(lambda x: x.copy(), initial)
    trained = helpers.drive(
        module, placement, initial,
        module.make_train_step(config, placement, run.variant),
        batches.train_batches(data, config.seed, config.global_batch, 2),
        calls)
    placed = module.from_host(trained.host, placement, like, 2, calls)
    helpers.assert_bitwise(module.to_host(placed), trained.host)
    assert digest.state_digest(module.to_host(placed)) == (
        digest.state_digest(trained.host)), (strategy, run.name)


def test_every_program_reaches_the_engine_as_one_plan(digits):
  """Our strategies and a team's Port each reach the engine as a `Plan`,
  and a Port's inherits none of our strategies' description: its truth,
  batches and judged metrics are its own."""
  from compare._src.prove import plan as plan_module  # pylint: disable=g-import-not-at-top
  from compare._src.prove import port as port_module  # pylint: disable=g-import-not-at-top
  from compare._src.prove import port_runs  # pylint: disable=g-import-not-at-top
  from compare._src.prove import strategy_plan  # pylint: disable=g-import-not-at-top
  from tests import toy_ports  # pylint: disable=g-import-not-at-top
  plans = []
  for name, strategy in strategies.STRATEGIES.items():
    config = strategy.make_config({"steps": 2}, digits)
    plans.append(strategy_plan.plan(strategy, config, digits, 8))
    assert plans[-1].name == name
  for made in (toy_ports.port(), toy_ports.port(reference_step=None)):
    plans.append(port_runs.plan(port_module.check(made)))
  for plan in plans:
    assert isinstance(plan, plan_module.Plan)
    names = {run.name for run in plan.runs}
    assert plan.truth in names, plan.name
    assert set(plan.port_runs) <= names | set(plan.skipped), plan.name
  ported = plans[-2:]
  assert [p.truth for p in ported] == ["reference", "pmap"]
  assert all(p.judged_metrics == ("train_loss",) for p in ported)
  assert all(p.test_batch == {} and p.test_size is None for p in ported)
