"""Adding a strategy is its backend modules plus one strategy file."""

import pytest

from compare._src import cli
from compare._src import show_diff
from compare._src import strategies
from compare._src import tolerances
from compare._src.strategies import data_parallel


class LinregTutorial(strategies.Strategy):
  """The pmap tutorial's linear regression as a strategy of its own."""

  name = "linreg_tutorial"
  program = "data_parallel"
  workloads = ("linreg",)
  runs = data_parallel.DataParallel.runs
  pairs = data_parallel.DataParallel.pairs
  tolerances = {"first_step": tolerances.Tolerance(1e-5, 1e-5, "test"),
                "final": tolerances.Tolerance(1e-3, 1e-3, "test")}


@pytest.fixture
def registered(monkeypatch):
  monkeypatch.setattr(strategies, "STRATEGIES", dict(strategies.STRATEGIES))
  return strategies.register(LinregTutorial())


def test_a_new_strategy_appears_everywhere(registered, tmp_path):
  choices = next(a.choices for a in cli.build_parser()._actions
                 if a.dest == "strategy")
  assert "linreg_tutorial" in choices
  assert "data_parallel" in show_diff.programs()
  assert strategies.get("linreg_tutorial").tolerances["final"].reason == "test"
  code = cli.main(["--strategy", "linreg_tutorial", "--steps", "3",
                   "--windows", "1", "--json", str(tmp_path / "r.json")])
  assert code == 0


def test_unknown_strategy_is_not_registered():
  with pytest.raises(ValueError, match="unknown strategy"):
    strategies.get("linreg_tutorial")


def test_no_strategy_name_in_the_generic_modules():
  import pathlib  # pylint: disable=g-import-not-at-top
  root = pathlib.Path(cli.__file__).parent
  for module in ("runner.py", "report.py", "cli.py"):
    text = (root / module).read_text()
    for name in strategies.STRATEGIES:
      assert f'"{name}"' not in text, (module, name)
  assert not any("if spec." in p.read_text() for p in root.rglob("*.py"))
