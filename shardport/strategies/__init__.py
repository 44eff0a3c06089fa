"""Every strategy, by name: the one registry, found by discovery.

A strategy is one module here (its config and validation, its runs, pairs,
tolerances and controls, and its one-device reference) that ends with
`STRATEGY = ItsClass()`, plus its two twin backend files
(`legacy_pmap/<program>.py`, `sharded/<program>.py`). Adding one edits no
list: every module of this package with a `STRATEGY` is registered, in the
order of their `rank`. The training programs (`python -m legacy_pmap.train`,
`python -m sharded.train`) take their `--strategy` choices from here, and
so do `python -m compare`, the guide's tables and the tests.
"""

import importlib
import pkgutil

from shardport.strategies.program import Program
from shardport.strategies.strategy import Strategy
from shardport.workloads import configs

STRATEGIES: dict[str, Strategy] = {}


class StrategyError(configs.ConfigError):
  """An unknown strategy name (`--strategy`)."""


def register(strategy: Strategy) -> Strategy:
  """Adds `strategy` to `STRATEGIES` under its name; returns it."""
  STRATEGIES[strategy.name] = strategy
  _restore_both_ways()
  return strategy


def get(name: str) -> Strategy:
  """The strategy called `name`."""
  if name not in STRATEGIES:
    raise StrategyError(f"unknown strategy {name!r}; choose one of "
                        f"{', '.join(STRATEGIES)}")
  return STRATEGIES[name]


def _restore_both_ways() -> None:
  """Each program resumes the checkpoints of those that name it in their
  `restores` (the same state in the same layout goes on either way)."""
  for strategy in STRATEGIES.values():
    named_by = [other.name for other in STRATEGIES.values()
                if strategy.name in type(other).restores]
    strategy.restores = tuple(dict.fromkeys(
        [*type(strategy).restores, *named_by]))


def _discover() -> list[Strategy]:
  found = []
  for info in pkgutil.iter_modules(__path__):
    module = importlib.import_module(f"{__name__}.{info.name}")
    if isinstance(getattr(module, "STRATEGY", None), Strategy):
      found.append(module.STRATEGY)
  return sorted(found, key=lambda strategy: (strategy.rank, strategy.name))


for _strategy in _discover():
  register(_strategy)

__all__ = ["STRATEGIES", "Program", "Strategy", "StrategyError", "get",
           "register"]
