"""Eight emulated CPU devices, set before anything imports jax, and one
compilation cache for the whole run."""

import os
import shutil
import tempfile

from shardport.launch import emulation

emulation.set_cpu_device_count(8)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The suite compiles the same programs many times over, in its pytest-xdist
# workers and in the programs its tests start (each proof of an example
# compiles that example's steps again): one persistent cache for the run,
# made by the first process to import this file and inherited by the rest,
# takes a third off (docs/jax-facts.md, Compilation cache). A size limit
# turns on jax's file lock, without which a process can read an entry
# another is still writing. A cache the caller set is left alone.
CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_OWN_CACHE = None
try:
  import filelock  # pylint: disable=g-import-not-at-top,unused-import
except ImportError:  # not installed with the test extras: no cache, no lock
  filelock = None
if filelock is not None and CACHE_ENV not in os.environ:
  _OWN_CACHE = tempfile.mkdtemp(prefix="shardport-tests-jax-cache-")
  os.environ.update({
      CACHE_ENV: _OWN_CACHE,
      "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
      "JAX_COMPILATION_CACHE_MAX_SIZE": str(8 << 30)})

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

# jax reads these when it is first imported, which a plugin may have done.
for _name, _option, _type in (
    (CACHE_ENV, "jax_compilation_cache_dir", str),
    ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
     "jax_persistent_cache_min_compile_time_secs", float),
    ("JAX_COMPILATION_CACHE_MAX_SIZE", "jax_compilation_cache_max_size",
     int)):
  if _name in os.environ:
    jax.config.update(_option, _type(os.environ[_name]))


def pytest_configure(config):
  del config
  assert jax.device_count() == 8, (
      "tests need 8 emulated devices: jax was imported before conftest set "
      f"XLA_FLAGS (found {jax.device_count()})")


def pytest_unconfigure(config):
  """Removes the run's cache, in the process that made it."""
  del config
  if _OWN_CACHE is not None:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def digits():
  from shardport.workloads import datasets  # pylint: disable=g-import-not-at-top
  return datasets.load("digits")


# The slowest tests (several processes each), started first so that the
# workers (pytest-xdist) do not wait on one of them at the end.
SLOW_FIRST = ("test_multiprocess.py", "test_multiprocess_faults.py")
def pytest_collection_modifyitems(config, items):
  """Starts the slowest tests first; skips tests marked `jax010` on jax <
  0.10 (the original-runtime env).

  Those tests pin behaviour that jax 0.10 introduced or removed (e.g. the
  Explicit default of `make_mesh`, `jax.device_put_replicated` being gone);
  `constraints/original-pmap-runtime.txt` installs jax 0.9.2.
  """
  del config
  items.sort(key=lambda item: item.path.name not in SLOW_FIRST)
  if jax.__version_info__ >= (0, 10):
    return
  skip = pytest.mark.skip(
      reason=f"jax >= 0.10 behaviour; this is jax {jax.__version__}")
  for item in items:
    if "jax010" in item.keywords:
      item.add_marker(skip)
