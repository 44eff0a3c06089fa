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
SLOW_FIRST = ("test_multiprocess.py",)
# Tests that compile the same program (examples/resnet's steps, on 8
# devices in one process), run in this order on one worker and before the
# rest: the first fills the suite's compilation cache and the others read
# it, where two workers would each compile it at once (the README's proof
# took 33 s in CI beside the recipe's, 6 s after it). (The two-process
# jobs run without the cache: tests/test_multiprocess.py.)
SHARED_COMPILES = {"resnet": (
    "test_prove.py::test_the_port_is_equivalent",
    "test_program_cli.py::test_the_readme_example_runs_on_8_devices_as_printed",
    "test_prove.py::test_the_example_proof_reports_every_run_and_check")}


def _group(nodeid: str) -> str | None:
  """The `SHARED_COMPILES` group of the test `nodeid`, or None."""
  where = nodeid.rsplit("/", 1)[-1]
  return next((name for name, tests in SHARED_COMPILES.items()
               if where in tests), None)


def _order(item) -> tuple[int, int]:
  """Where `item` runs: a group of `SHARED_COMPILES` first, in its order,
  then `SLOW_FIRST`, then the rest (the sort is stable)."""
  if group := _group(item.nodeid):
    return 0, SHARED_COMPILES[group].index(item.nodeid.rsplit("/", 1)[-1])
  return (1 if item.path.name in SLOW_FIRST else 2), 0


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """pytest-xdist's `loadgroup` with `SHARED_COMPILES` as its groups.

  Its own `xdist_group` mark groups nothing under pytest 9.2 (it renames
  the test, which pytest 9.2 no longer lets it do: pytest-xdist issue
  1386), so the groups are read here, by the tests' ids. Every other test
  is a unit of its own, handed to the next free worker.
  """
  if config.getvalue("dist") != "loadgroup":
    return None
  from xdist.scheduler import LoadGroupScheduling  # pylint: disable=g-import-not-at-top

  class SharedCompiles(LoadGroupScheduling):
    def _split_scope(self, nodeid):
      return _group(nodeid) or nodeid

  return SharedCompiles(config, log)


def pytest_collection_modifyitems(config, items):
  """Starts the tests that share compiles, then the slowest, first; skips
  tests marked `jax010` on jax < 0.10 (the original-runtime env).

  Those tests pin behaviour that jax 0.10 introduced or removed (e.g. the
  Explicit default of `make_mesh`, `jax.device_put_replicated` being gone);
  `constraints/original-pmap-runtime.txt` installs jax 0.9.2.
  """
  del config
  items.sort(key=_order)
  if jax.__version_info__ >= (0, 10):
    return
  skip = pytest.mark.skip(
      reason=f"jax >= 0.10 behaviour; this is jax {jax.__version__}")
  for item in items:
    if "jax010" in item.keywords:
      item.add_marker(skip)
