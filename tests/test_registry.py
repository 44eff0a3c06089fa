"""Adding a strategy is one strategy module plus its two twin backend files,
found by discovery: no list names it."""

import pathlib
import re

import pytest

from compare._src import cli
from compare._src import show_diff
from shardport import strategies
from shardport.strategies import data_parallel
from shardport.strategies import tolerances

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("compare", "legacy_pmap", "sharded", "shardport")


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
                   "--windows", "0", "--json", str(tmp_path / "r.json")])
  assert code == 0


def test_unknown_strategy_is_not_registered():
  with pytest.raises(ValueError, match="unknown strategy"):
    strategies.get("linreg_tutorial")


def test_no_strategy_name_in_the_generic_modules():
  root = pathlib.Path(cli.__file__).parent
  for module in ("prove/runner.py", "prove/report.py", "cli.py"):
    text = (root / module).read_text()
    for name in strategies.STRATEGIES:
      assert f'"{name}"' not in text, (module, name)
  assert not any("if spec." in p.read_text() for p in root.rglob("*.py"))


def _sources_naming(name, root=ROOT):
  """The package sources that name `name` as a word."""
  word = re.compile(rf"\b{re.escape(name)}\b")
  return sorted(str(path.relative_to(root)) for package in PACKAGES
                for path in (root / package).rglob("*.py")
                if word.search(path.read_text(encoding="utf-8")))


# The strategies added last, whose names are not also words their code is
# written in ("ensemble", "accumulation" and "data_parallel" are).
@pytest.mark.parametrize("name", ["fsdp", "ensemble_data"])
def test_a_strategy_is_named_in_its_module_and_its_twins_only(name):
  named = _sources_naming(name)
  assert len(named) <= 4, named  # issue 30's bound
  assert f"shardport/strategies/{name}.py" in named
  # Its twins, and its `compare.Port` where it is proved as one.
  assert set(named) <= {f"shardport/strategies/{name}.py",
                        f"legacy_pmap/{name}.py", f"sharded/{name}.py",
                        f"compare/_src/ports/{name}.py"}, named


def test_the_count_sees_a_strategy_named_in_a_generic_module(tmp_path):
  # Negative control: a fifth source naming fsdp is counted.
  for package, stem in [("shardport", "strategies/fsdp"), ("legacy_pmap",
                         "fsdp"), ("sharded", "fsdp"), ("compare", "runner"),
                        ("shardport", "training/loop")]:
    path = tmp_path / package / f"{stem}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('if name == "fsdp":\n  pass\n')
  assert len(_sources_naming("fsdp", tmp_path)) == 5


_EXTRA = """
from shardport.strategies import data_parallel


class Extra(data_parallel.DataParallel):
  name = "extra"
  rank = 99


STRATEGY = Extra()
"""


def test_a_module_with_a_strategy_is_found_with_no_list_edited(
    tmp_path, monkeypatch):
  (tmp_path / "extra.py").write_text(_EXTRA)
  # Negative control: a module without `STRATEGY` is not a strategy.
  (tmp_path / "helper.py").write_text("RANK = 1\n")
  monkeypatch.setattr(strategies, "__path__",
                      [*strategies.__path__, str(tmp_path)])
  found = [s.name for s in strategies._discover()]  # pylint: disable=protected-access
  assert found == [*strategies.STRATEGIES, "extra"]


def test_each_program_restores_those_that_restore_it():
  assert strategies.get("data_parallel").restores == ("fsdp",)
  assert strategies.get("fsdp").restores == ("data_parallel",)
  assert strategies.get("ensemble").restores == ()
