"""Every strategy `compare` knows, by name: the one registry.

The CLI's `--strategy` choices, `--show-diff`'s programs, the guide's
tolerance table and order, and the tests' parametrisation all derive from
`STRATEGIES`. Adding a strategy is its backend modules plus one file here,
registered below (or with `register` from elsewhere).
"""

from compare._src.strategies.accumulation import Accumulation
from compare._src.strategies.base import NegativeControl
from compare._src.strategies.base import RunSpec
from compare._src.strategies.base import Strategy
from compare._src.strategies.data_parallel import DataParallel
from compare._src.strategies.ensemble import Ensemble
from compare._src.strategies.ensemble_data import EnsembleData
from compare._src.strategies.fsdp import Fsdp
from shardport.workloads import configs

STRATEGIES: dict[str, Strategy] = {}


class StrategyError(configs.ConfigError):
  """An unknown strategy name."""


def register(strategy: Strategy) -> Strategy:
  """Adds `strategy` to `STRATEGIES` under its name; returns it."""
  STRATEGIES[strategy.name] = strategy
  return strategy


def get(name: str) -> Strategy:
  """The strategy called `name`."""
  if name not in STRATEGIES:
    raise StrategyError(f"unknown strategy {name!r}; choose one of "
                        f"{', '.join(STRATEGIES)}")
  return STRATEGIES[name]


for _strategy in (DataParallel(), Ensemble(), Accumulation(), EnsembleData(),
                  Fsdp()):
  register(_strategy)

__all__ = ["STRATEGIES", "NegativeControl", "RunSpec", "Strategy",
           "StrategyError", "get", "register"]
