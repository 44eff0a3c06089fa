"""The suite's own scheduling and compilation cache (tests/conftest.py):
the tests grouped to share their compiles exist, so that a renamed test
cannot leave its group silently (the group would then compile its program
twice at once), and a module's own cache never switches the suite's off
for the tests after it on its worker."""

import pathlib
import re

import jax

from tests import compile_cache
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


def test_a_modules_cache_leaves_the_suites_in_force(tmp_path_factory):
  # The suite's cache (tests/conftest.py) is the module's, and still in
  # force after it: none of the module's own switched on and then off.
  suite = jax.config.jax_compilation_cache_dir
  assert suite, "tests/conftest.py sets the suite's cache"
  body = compile_cache.module_cache(tmp_path_factory)
  assert next(body) == suite
  assert next(body, None) is None
  assert jax.config.jax_compilation_cache_dir == suite


def test_a_module_run_alone_gets_its_own_cache_then_none(tmp_path_factory):
  suite = jax.config.jax_compilation_cache_dir
  least = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_compilation_cache_dir", None)
  try:
    body = compile_cache.module_cache(tmp_path_factory)
    own = next(body)
    assert own and own != suite
    assert jax.config.jax_compilation_cache_dir == own
    assert next(body, None) is None
    assert jax.config.jax_compilation_cache_dir is None
  finally:
    jax.config.update("jax_compilation_cache_dir", suite)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", least)
