"""Our strategies as `compare.Port`s: the engine proves them as a team's.

Each strategy with a module here is written, from its backends' twin
modules, as the `compare.Port` a team would write for it (`port(config,
data, n_devices, control)`), and `python -m compare --strategy S` proves
that Port (`plan`). A negative control is planted where the strategy's
controls always were, in the port's twin modules, before the Port's steps
are built from them; the Port is checked unplanted, then runs planted.
"""

import dataclasses
import importlib
import pkgutil

from compare._src.prove import plan as plan_module
from compare._src.prove import port as port_module
from compare._src.prove import port_runs
from compare._src.prove import strategy_plan
from shardport.strategies import perturbations
from shardport.training.metrics import global_devices

# Strategy name -> the module whose `port` writes it as a Port: the
# module of this package named as the strategy (a strategy is named in its
# own modules only: tests/test_registry.py).
PORTS = {module.name: f"{__name__}.{module.name}"
         for module in pkgutil.iter_modules(__path__)}
# Our strategies always train every calibration run (a Port asks for 0-3).
CALIBRATION_RUNS = len(perturbations.CALIBRATIONS)


def has_port(strategy) -> bool:
  """Whether `strategy` is proved as a Port (`plan`)."""
  return strategy.name in PORTS


def plan(strategy, config, data, n_devices: int, control=None):
  """`strategy`'s Port with `config` on `n_devices` devices per process,
  checked and planned, `control`'s mistake (if any) in its ports.

  Returns:
    The engine's `Plan`, its `control` set.
  """
  build = importlib.import_module(PORTS[strategy.name]).port
  checked = port_module.check(build(strategy, config, data, n_devices))
  if control is not None:
    checked = port_module.planted(checked, build(strategy, config, data,
                                                 n_devices, control))
  return dataclasses.replace(port_runs.plan(checked, CALIBRATION_RUNS),
                             control=control)


def planned(strategy, config, data, n_devices: int, control=None):
  """Any of our strategies planned on `n_devices` devices per process,
  `control` planted: as its Port where it is written as one (`plan`),
  else by `strategy_plan` (which takes the devices of every process)."""
  if has_port(strategy):
    return plan(strategy, config, data, n_devices, control)
  return plan_module.planted(strategy_plan.plan(
      strategy, config, data, global_devices(n_devices)), control)
