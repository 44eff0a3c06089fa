"""The engine reads a `Plan` and nothing else: our strategies are asked
once, before it starts (`strategy_plan.plan`), and a negative control is a
change of the plan (`plan.planted`)."""

import dataclasses

import pytest

from compare._src.prove import plan as plan_module
from compare._src.prove import proof
from compare._src.prove import strategy_plan
from shardport import strategies
from shardport.workloads import datasets

# What a strategy answers once, to be planned: never asked by the engine.
ASKED_ONCE = ("active_runs", "why_skipped", "calls_per_step", "eval_every",
              "control")


def _linreg(name="data_parallel"):
  strategy = strategies.get(name)
  data = datasets.load("linreg")
  config = strategy.make_config({"workload": "linreg", "steps": 3}, data)
  return strategy, config, data


def test_the_engine_never_asks_the_strategy_what_the_plan_holds(monkeypatch):
  strategy, config, data = _linreg()
  planned = strategy_plan.plan(strategy, config, data, 8)

  def asked(*args, **kwargs):
    raise AssertionError("the engine asked the strategy")

  for name in ASKED_ONCE:
    monkeypatch.setattr(strategy, name, asked)
  report = proof.prove_plan(planned, config, 8, windows=0)
  assert report["verdict"] == "pass"
  assert set(report["runs"]) == {run.name for run in planned.runs}


def test_a_planted_plan_is_a_new_plan_with_the_mistake_in_its_ports_only():
  strategy, config, data = _linreg()
  planned = strategy_plan.plan(strategy, config, data, 8)
  control = strategy.control("update-1pct-at:2")
  planted = plan_module.planted(planned, control)
  assert planted.control is control and planned.control is None
  for run in planned.runs:
    moved = planted.run(run.name).module is not run.module
    assert moved == (run.name in planned.port_runs), run.name
  # Planted again with no control: the same plan, its control kept.
  assert plan_module.planted(planted, None) is planted


def test_a_plan_is_frozen():
  strategy, config, data = _linreg()
  planned = strategy_plan.plan(strategy, config, data, 8)
  with pytest.raises(dataclasses.FrozenInstanceError):
    planned.truth = "pmap"


@pytest.mark.parametrize("name", ["data_parallel", "fsdp", "accumulation"])
def test_a_strategy_is_planned_as_its_port_with_the_strategys_runs(name):
  """`--strategy data_parallel`, `fsdp` and `accumulation` are proved as
  `compare.Port`s (`compare._src.ports`): each plan has the runs, pairs,
  truth, port runs, calibration runs and judged metrics the strategy
  declares, the runs being the Port's own, none of the strategy's modules
  (fsdp's data_parallel run and accumulation's plain steps
  `compare.Baseline`s, in no port run), and its calls per optimiser step
  the strategy's. (MultiSteps' K calls need an optax workload, whose data
  set costs 20 s or more to load here: `tests/test_port_run_fields.py`
  proves them on a toy.)"""
  from compare._src import ports  # pylint: disable=g-import-not-at-top
  from shardport.strategies import perturbations  # pylint: disable=g-import-not-at-top
  strategy, config, data = _linreg(name)
  planned = ports.plan(strategy, config, data, 8)
  assert [run.name for run in planned.runs] == [
      run.name for run in strategy.runs]
  assert planned.pairs == tuple(strategy.pairs)
  assert (planned.truth, planned.port_runs, planned.judged_metrics) == (
      strategy.truth, tuple(strategy.port_runs),
      tuple(strategy.judged_metrics))
  assert {run.name: run.calls for run in planned.runs} == {
      run.name: strategy.calls_per_step(config, run.name)
      for run in strategy.runs}
  assert planned.calibrations == perturbations.CALIBRATIONS
  modules = {type(run.module).__module__ for run in planned.runs}
  assert modules == {"compare._src.prove.port_runs"}, modules
  assert planned.control is None
  control = strategy.control("lr-1pct")
  assert ports.plan(strategy, config, data, 8, control).control is control
