"""Eight emulated CPU devices, set before anything imports jax."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8")
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
  from workloads import datasets  # pylint: disable=g-import-not-at-top
  return datasets.load("digits")
