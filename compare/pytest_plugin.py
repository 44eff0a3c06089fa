"""The `shardport` pytest plugin: emulated CPU devices before jax starts.

Installing shardport registers it (the `pytest11` entry point). With
`shardport_devices = N` in a project's pytest ini (or `--shardport-devices
N`) it emulates N CPU devices before any conftest or test module imports jax
(`pytest_load_initial_conftests`), and fails the session at once where jax
started before it could. It also gives XLA's CPU client two threads per
device (`NPROC`, unless set; `shardport.launch.emulation.cpu_threads`), so
that a program that queues steps with collectives without reading them (the
JAX pmap tutorial as written) does not deadlock the emulated devices; the
environment carries both to the programs a test starts. The assertion teams
call is `compare.testing`'s.
"""

import os

INI = "shardport_devices"


def _devices(config) -> int | None:
  value = config.getoption("shardport_devices", None) or config.getini(INI)
  if not value:
    return None
  if not str(value).isdigit() or int(value) < 1:
    import pytest  # pylint: disable=g-import-not-at-top
    raise pytest.UsageError(f"{INI} must be a positive integer, got {value!r}")
  return int(value)


def pytest_addoption(parser):
  """`shardport_devices` (ini) and `--shardport-devices N`."""
  parser.addini(INI, "emulated CPU devices for jax, set before it starts")
  parser.addoption("--shardport-devices", dest="shardport_devices",
                   default=None, help="emulated CPU devices for jax")


def pytest_load_initial_conftests(early_config, parser, args):
  """Sets the device count before conftest files and tests import jax."""
  del parser, args
  count = _devices(early_config)
  if count:
    from shardport.launch import emulation  # pylint: disable=g-import-not-at-top
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    emulation.set_cpu_device_count(count)
    emulation.set_cpu_threads(count)


def pytest_sessionstart(session):
  """Fails at once where jax started with another device count."""
  count = _devices(session.config)
  if count:
    import jax  # pylint: disable=g-import-not-at-top
    import pytest  # pylint: disable=g-import-not-at-top
    if jax.device_count() != count:
      raise pytest.UsageError(
          f"{INI} = {count} but jax sees {jax.device_count()} devices: jax "
          "started before the plugin could set XLA_FLAGS")
