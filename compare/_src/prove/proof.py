"""`prove`: the whole proof of a port, for our strategies and a team's own.

`python -m compare --strategy S` and `--program PKG.MODULE:NAME` both come
here, as does a team's own code (`compare.prove(port)`) and its CI
(`compare.testing`): the first-step and lockstep checks, the free-running
outcome against a calibration, digests, throughput, compile time,
collectives and memory per run, in one report.
"""

import dataclasses
import datetime
import os

from compare._src.prove import matmul_precision
from compare._src.prove import plan as plan_module
from compare._src.prove import plots
from compare._src.prove import port as port_module
from compare._src.prove import report as report_module
from shardport.launch import distributed
from shardport.launch import files
from shardport.strategies import negative_controls as controls

EXIT_PASS, EXIT_DIFFER, EXIT_DIVERGED = 0, 1, 3
# What a Port's reported losses are (our strategies say their own:
# `Strategy.loss_convention`, added by the CLI).
LOSS_CONVENTION = ("the train loss as the steps return it (pmap's averaged "
                   "over devices)")


@dataclasses.dataclass(frozen=True)
class Proof:
  """What `prove` found.

  Attributes:
    report: the whole report, as `--json` writes it.
    lines: printed lines the report's own table does not have (our
      strategies' own, added by the CLI; none for a team's `Port`).
    plot_members: whether `plot` draws every member's test accuracy.
  """

  report: dict
  lines: tuple[str, ...] = ()
  plot_members: bool = False

  @property
  def verdict(self) -> str:
    """`pass`, `fail` (a pair differs) or `diverged`."""
    return self.report["verdict"]

  @property
  def passed(self) -> bool:
    return self.verdict == "pass"

  @property
  def first_failure(self) -> str | None:
    """The earliest failing step in words, or None."""
    return self.report.get("first_failure")

  @property
  def exit_code(self) -> int:
    """`python -m compare`'s exit code: 0 pass, 1 differ, 3 diverged."""
    return {"pass": EXIT_PASS, "fail": EXIT_DIFFER}.get(self.verdict,
                                                         EXIT_DIVERGED)

  def table(self) -> str:
    """The printed report."""
    return report_module.table(self.report, list(self.lines))

  def write_json(self, path: str) -> None:
    """The report as JSON at `path`, atomically."""
    files.write_json(self.report, path)

  def plot(self, path: str) -> None:
    """Loss, metrics, drift and lockstep panels as a PNG at `path`."""
    plots.learning_curves(self.report, path, members=self.plot_members)


def prepare(port, steps: int | None = None, calibration_runs: int = 0):
  """A team's `Port`, checked (`port.check`) and planned.

  Returns:
    `(plan, config)`; raises `PortError` (one line) on any mistake.
  """
  from compare._src.prove import port_runs  # pylint: disable=g-import-not-at-top
  if steps is not None:
    port = dataclasses.replace(port, steps=steps)
  checked = port_module.check(port)
  return (port_runs.plan(checked, calibration_runs),
          port_runs.config_of(checked))


def port_runs_seeds():
  """The calibration runs a Port may ask for, by name."""
  from compare._src.prove import port_judging  # pylint: disable=g-import-not-at-top
  return port_judging.NUDGE_SEEDS


def _control(plan, control, steps):
  if control is None or not isinstance(control, str):
    return control
  control = controls.chosen(plan.negative_controls, control, plan.name)
  if control.step and control.step > steps:
    raise port_module.PortError(
        f"--negative-control {control.name}: step {control.step} is past "
        f"the last step ({steps})")
  return control


ONE_DEVICE = (
    "mesh: 1 device: the port's collectives (pmean, psum, all_gather) do "
    "nothing on one device, so a wrong port would pass; emulate devices "
    "before jax starts (XLA_FLAGS=--xla_force_host_platform_device_count=8, "
    "jax.config.update('jax_num_cpu_devices', 8), or shardport_devices = 8 "
    "in pytest's ini) or pass one_device=True to prove it anyway")


def prove(port, *, steps: int | None = None, control=None,
          check_every: int = 1, windows: int = 10,
          progress: bool = False, one_device: bool = False,
          calibration_runs: int = 0) -> Proof:
  """Proves a team's port: every run from the same state on the same batches.

  Args:
    port: the team's `compare.Port`.
    steps: steps to train, overriding the port's own.
    control: a negative control's name (e.g. `"update-1pct-at:20"`) to
      plant in the port's runs, so that the proof must fail.
    check_every: lockstep checks at step 1, every K-th step and the last.
    windows: timing windows per run (0: not timed, the proof alone).
    progress: a progress bar on stderr.
    one_device: prove a port whose mesh has one device (refused otherwise:
      its collectives are the identity there, so a wrong one passes).
    calibration_runs: free-running runs of the truth on nudged batches
      (at most 3), shown beside the final state, never judged; each holds
      a copy of the state on the devices, so none by default.

  Returns:
    The `Proof`.

  Raises:
    PortError: a `Port` that cannot be proved as described (or not a
      `Port`, or on one device unasked), before anything compiles.
  """
  import jax  # pylint: disable=g-import-not-at-top
  if not isinstance(port, port_module.Port):
    raise port_module.PortError(
        f"prove takes a compare.Port, got {type(port).__name__}")
  if (isinstance(port.mesh, jax.sharding.Mesh) and port.mesh.size == 1
      and not one_device):
    raise port_module.PortError(ONE_DEVICE)
  if calibration_runs not in range(len(port_runs_seeds()) + 1):
    raise port_module.PortError(
        f"calibration_runs: 0 to {len(port_runs_seeds())}, got "
        f"{calibration_runs}")
  plan, config = prepare(port, steps, calibration_runs)
  # Devices per process, as for our strategies (the mesh spans them all).
  return Proof(prove_plan(plan, config, port.mesh.size // jax.process_count(),
                          control=control, check_every=check_every,
                          windows=windows, progress=progress))


def prove_plan(plan, config, n_devices: int, *, control=None,
               check_every: int = 1, windows: int = 10,
               progress: bool = False, switch_at: int | None = None,
               header: dict | None = None) -> dict:
  """The engine's one entry: a program's `Plan` proved; its report.

  Args:
    plan: what to prove (`port_runs.plan` of a `Port`, or
      `strategy_plan.plan` of one of our strategies).
    config: its config (checked).
    n_devices: devices per process.
    control: a negative control (or its name) to plant in the port's runs.
    check_every: lockstep checks at step 1, every K-th step and the last.
    windows: timing windows per run (0: not timed, the proof alone).
    progress: a progress bar on stderr.
    switch_at: the port's runs restore pmap's checkpoint of this step.
    header: fields the caller adds to the report's header.

  Returns:
    The report.
  """
  import jax  # pylint: disable=g-import-not-at-top
  from compare._src.prove import outcome  # pylint: disable=g-import-not-at-top
  plan = plan_module.planted(plan, _control(plan, control, config.steps))
  precision, precision_fields = matmul_precision.for_proof(
      jax.devices()[0].platform)
  with precision:
    result = outcome.compare(plan, config, n_devices, windows=windows,
                             progress=progress, check_every=check_every,
                             switch_at=switch_at)
  full = {**describe(plan, config, n_devices, plan.control, switch_at),
          **precision_fields, **(header or {}), **result}
  full["throughput_ratio_shard_map_vs_pmap"] = (
      report_module.throughput_ratio(full))
  return full


def describe(plan, config, n_devices: int, control=None,
             switch_at=None) -> dict:
  """The report's header fields: what ran, where, on what."""
  import jax  # pylint: disable=g-import-not-at-top
  return {"schema": report_module.SCHEMA, "strategy": plan.name,
          "date": datetime.date.today().isoformat(),
          "workload": config.workload, "dataset": config.dataset,
          "platform": jax.devices()[0].platform,
          "devices": n_devices * jax.process_count(),
          "processes": jax.process_count(),
          "collectives": distributed.collectives(),
          "jax_version": jax.__version__,
          **pmap_runtime(),
          "load_average": [round(x, 2) for x in os.getloadavg()],
          "steps": config.steps, "global_batch": config.global_batch,
          "learning_rate": config.learning_rate, "seed": config.seed,
          "negative_control": getattr(control, "name", control),
          "switch_at": switch_at, "loss_convention": LOSS_CONVENTION}


def pmap_runtime() -> dict:
  """Which pmap runs here, and the warning when JAX_PMAP_SHMAP_MERGE is
  ignored."""
  from legacy_pmap import devices  # pylint: disable=g-import-not-at-top
  return {"pmap_runtime": devices.pmap_runtime(),
          "pmap_runtime_warning": devices.pmap_runtime_warning()}
