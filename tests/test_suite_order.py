"""The suite's own scheduling (tests/conftest.py): the tests grouped to
share their compiles exist, so that a renamed test cannot leave its group
silently (the group would then compile its program twice at once)."""

import pathlib
import re

from tests import conftest

TESTS = pathlib.Path(__file__).resolve().parent


def _defined(where: str) -> bool:
  file, name = where.split("::")
  path = TESTS / file
  return path.is_file() and bool(
      re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.M))


def test_every_grouped_test_exists():
  missing = [where for tests in conftest.SHARED_COMPILES.values()
             for where in tests if not _defined(where)]
  assert not missing, missing


def test_a_renamed_test_would_be_found_missing():
  assert _defined("test_prove.py::test_the_port_is_equivalent")
  assert not _defined("test_prove.py::test_the_port_is_equivalent_renamed")


def test_groups_are_read_by_test_id():
  assert conftest._group(  # pylint: disable=protected-access
      "tests/test_prove.py::test_the_port_is_equivalent") == "resnet"
  assert conftest._group(  # pylint: disable=protected-access
      "tests/test_prove.py::test_each_wrong_port_fails_at_step_1[x]") is None
