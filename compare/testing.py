"""Proving a port in a team's CI: an assertion, and 8 emulated devices.

In a test::

    from compare import testing

    def test_port_is_equivalent():
      testing.assert_port_equivalent(my_package.port())

The devices: add `shardport_devices = 8` to the `[tool.pytest.ini_options]`
of `pyproject.toml` (or `pytest.ini`). The `shardport` pytest plugin
(`compare.pytest_plugin`), which installing shardport registers, then
emulates that many CPU devices before any test module imports jax. Without
the plugin, the same recipe in the top `conftest.py`, before anything
imports jax::

    from shardport.launch import emulation
    emulation.set_cpu_device_count(8)
    emulation.set_cpu_threads(8)

The plugin (and that recipe) also give XLA's CPU client two threads per
device, so that steps queued unread do not deadlock the emulated devices. A
test that runs a program as a script hands it the same settings with
`emulated_cpu_environment`::

    subprocess.run([sys.executable, "train.py"], check=True,
                   env=testing.emulated_cpu_environment(8))
"""

import os

__all__ = ["assert_port_equivalent", "emulated_cpu_environment",
           "failure_message"]


def assert_port_equivalent(port, *, steps=None, check_every: int = 1,
                           windows: int = 0, control=None,
                           one_device: bool = False):
  """Proves `port` (a `compare.Port`) and fails the test where it differs.

  Args:
    port: the team's program and its port.
    steps: steps to train, overriding the port's own.
    check_every: lockstep checks at step 1, every K-th step and the last.
    windows: timing windows per run (0: not timed; a CI run needs no timing).
    control: a negative control to plant (e.g. `"update-1pct-at:5"`), to
      show in the team's own CI that the proof can fail.
    one_device: prove a port on a 1-device mesh (refused otherwise).

  Returns:
    The `compare.Proof`, for further assertions.

  Raises:
    AssertionError: the port is not equivalent (the message names the first
      failing step, the pair, the leaf and the sizes), or the `Port` itself
      is wrong (its one-line `PortError`).
  """
  from compare._src.prove import port as port_module  # pylint: disable=g-import-not-at-top
  from compare._src.prove import proof  # pylint: disable=g-import-not-at-top
  try:
    result = proof.prove(port, steps=steps, check_every=check_every,
                         windows=windows, control=control,
                         one_device=one_device)
  except port_module.PortError as err:
    raise AssertionError(f"{getattr(port, 'name', port)!s}: {err}") from None
  if not result.passed:
    raise AssertionError(failure_message(result.report))
  return result


def failure_message(report: dict) -> str:
  """Why a proof failed, in one paragraph: the first failing step, the pair
  and the leaf, then the sizes."""
  sizes = (f"{report['devices']} devices, global batch "
           f"{report['global_batch']}, {report['steps']} steps")
  if report["verdict"] == "diverged":
    return (f"{report['strategy']}: training diverged at step "
            f"{report['diverged_at']} in {', '.join(report['diverged_runs'])}"
            f" ({sizes})")
  failing = [v for v in report["equivalence"] if v["verdict"] == "differ"]
  first = report.get("first_failure")
  if first is None and failing:
    v = failing[0]
    first = (f"{v['a']} vs {v['b']} differ at the {v['at'].replace('_', ' ')}"
             + (f", most at {v['worst']}" if v.get("worst") else ""))
  return f"{report['strategy']} is not equivalent: {first} ({sizes})"


def emulated_cpu_environment(devices: int = 8, base=None) -> dict:
  """The environment of a program run on `devices` emulated CPU devices.

  `base` (default `os.environ`) with jax on CPU, `devices` emulated devices
  (any count already in `XLA_FLAGS` replaced) and XLA's CPU client given two
  threads per device unless `NPROC` is set, so that steps with collectives
  queued unread (a loop that prints every 100th loss) do not deadlock the
  devices (`shardport.launch.emulation.cpu_threads`; docs/REWRITE.md,
  Testing on emulated CPU devices).

  Raises:
    ValueError: `devices` is not a positive integer.
  """
  from shardport.launch import emulation  # pylint: disable=g-import-not-at-top
  if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
    raise ValueError(f"devices must be a positive integer, got {devices!r}")
  env = dict(os.environ if base is None else base)
  flags = [flag for flag in env.get("XLA_FLAGS", "").split()
           if not flag.startswith(emulation.COUNT_FLAG)]
  env["XLA_FLAGS"] = " ".join([*flags, f"{emulation.COUNT_FLAG}={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  env.setdefault(emulation.THREADS_ENV, str(emulation.cpu_threads(devices)))
  return env
