"""Team tests on emulated CPU devices: the thread pool that does not deadlock.

A program that queues steps with collectives unread (the JAX pmap tutorial
as written) aborted in XLA:CPU's rendezvous on 8 emulated devices with the
CPU client's own pool, and ran 20 of 20 times with two threads per device
(`python -m bench.probes.emulated_cpu_runs`, docs/REWRITE.md). These tests pin
the settings the pytest plugin and `compare.testing.emulated_cpu_environment`
give; the runs themselves are the bench's (minutes, and a deadlock shows
in some runs only). 6 s measured on 2 cores shared with other jobs.
"""

import os
import pathlib
import textwrap

import pytest

from compare import testing
from shardport.launch import emulation

pytest_plugins = ("pytester",)
CORES = len(os.sched_getaffinity(0))
ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("devices", [1, 4, 8, 64])
def test_two_threads_per_device_or_the_cores(devices):
  assert emulation.cpu_threads(devices) == max(CORES, 2 * devices)


def test_the_environment_emulates_the_devices_with_their_threads():
  env = testing.emulated_cpu_environment(8, base={
      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false "
                   "--xla_force_host_platform_device_count=2", "HOME": "/h"})
  assert env["XLA_FLAGS"].split() == [
      "--xla_cpu_multi_thread_eigen=false",
      "--xla_force_host_platform_device_count=8"]
  assert env["NPROC"] == str(max(CORES, 16))
  assert env["JAX_PLATFORMS"] == "cpu" and env["HOME"] == "/h"


def test_a_thread_count_the_user_set_is_kept():
  env = testing.emulated_cpu_environment(8, base={"NPROC": "3"})
  assert env["NPROC"] == "3"


@pytest.mark.parametrize("devices", [0, -1, 2.0, "8", True])
def test_a_device_count_that_is_not_a_positive_integer_is_refused(devices):
  with pytest.raises(ValueError, match="positive integer"):
    testing.emulated_cpu_environment(devices)


def test_the_plugin_gives_the_devices_their_threads(pytester, monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  monkeypatch.delenv("NPROC", raising=False)
  # The session pytester starts imports this checkout's plugin.
  monkeypatch.setenv("PYTHONPATH", str(ROOT))
  pytester.makeini("[pytest]\nshardport_devices = 4\n")
  pytester.makepyfile(test_threads=textwrap.dedent(f"""
      import os
      import jax

      def test_threads():
        assert jax.device_count() == 4
        assert os.environ["NPROC"] == "{max(CORES, 8)}"
  """))
  pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(
      passed=1)
