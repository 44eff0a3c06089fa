"""The suite's compilation cache (tests/conftest.py): a module's own
cache (tests/compile_cache.py) never switches the suite's off for the
tests after it on its pytest-xdist worker."""

import jax

from tests import compile_cache


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
