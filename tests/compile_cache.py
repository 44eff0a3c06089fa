"""A persistent compilation cache for a test module's runs.

The suite has one already (tests/conftest.py, for every process of the
run); a module run on its own, or with a caller's cache, gets one of its
own. Either way the cache in force before the module is in force after
it: a module that switched it off at its end left every later test on its
pytest-xdist worker compiling without it.
"""

import jax
from jax.experimental.compilation_cache import compilation_cache

_OPTIONS = ("jax_compilation_cache_dir",
            "jax_persistent_cache_min_compile_time_secs")


def module_cache(tmp_path_factory):
  """Yields the cache directory in force during the module (a pytest
  fixture's body); restores the options as they were after it."""
  before = {name: getattr(jax.config, name) for name in _OPTIONS}
  if before["jax_compilation_cache_dir"]:
    yield before["jax_compilation_cache_dir"]
    return
  cache = str(tmp_path_factory.mktemp("xla"))
  # Every compile cached: most of the modules' compiles take under the
  # default second.
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
  compilation_cache.set_cache_dir(cache)
  compilation_cache.reset_cache()
  yield cache
  for name, value in before.items():
    jax.config.update(name, value)
  compilation_cache.reset_cache()
