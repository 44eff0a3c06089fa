"""Eight emulated CPU devices, set before anything imports jax."""

import os

from shardport.launch import emulation

emulation.set_cpu_device_count(8)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position


def pytest_configure(config):
  del config
  assert jax.device_count() == 8, (
      "tests need 8 emulated devices: jax was imported before conftest set "
      f"XLA_FLAGS (found {jax.device_count()})")


@pytest.fixture(scope="session")
def digits():
  from shardport.workloads import datasets  # pylint: disable=g-import-not-at-top
  return datasets.load("digits")


# The slowest tests (several processes each), started first so that the
# workers (pytest-xdist) do not wait on one of them at the end.
SLOW_FIRST = ("test_multiprocess.py",)


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
