"""A `Port` as the engine runs a program: its runs, and how it is judged.

`compare.prove` describes a team's `Port` the way every program describes
itself to the engine (`shardport.strategies.protocol`): a module per run
with the `StrategyModule` API, in the Port's own view of its state
(pmap's, the port's and the optional one-device reference's), and its
`Plan` (`plan`): its pairs, tolerances, calibration and controls. Nothing
of our strategies' own description applies to it.
"""

import dataclasses
import functools

import jax
import numpy as np

from compare._src.prove import adapt
from compare._src.prove import host_copies
from compare._src.prove import pmap_shards
from shardport.training import checkpoints
from compare import conversions
from shardport.strategies import negative_controls as controls
from compare._src.prove import port_judging
from compare._src.prove import port_steps
from compare._src.prove import run_fields
from shardport.strategies.reference import OneDevice
from compare._src.prove.plan import Plan
from compare._src.prove.plan import PlannedRun
from shardport.strategies.tolerances import Tolerance
from legacy_pmap import devices as pmap_devices
from sharded import devices as mesh_devices

FIRST_STEP = Tolerance(rtol=1e-5, atol=1e-5, reason=(
    "after one step from the same state the runs differ only in summation "
    "order, far below 1e-5 of each leaf's largest value; a 1% change of the "
    "update is 1e-2 of it"))
FINAL = Tolerance(rtol=1e-3, atol=1e-3, reason=(
    "shown, not judged: a pair that is not bitwise at the end is judged by "
    "its metrics against the calibration runs"))


@dataclasses.dataclass(frozen=True)
class PortConfig:
  """What the runner reads of a config, for a `Port`."""

  workload: str
  steps: int
  global_batch: int
  seed: int = 0
  dataset: str = "its own batches"
  learning_rate: float | None = None


def program_fields(state) -> dict:
  """Every pytree field of a train state as the program holds it (read
  through its run's `StateView` where the Port gives one), so that every
  leaf of a team's state is compared."""
  return {field.name: getattr(state, field.name)
          for field in dataclasses.fields(state)
          if field.metadata.get("pytree_node", True)}


class _Run:
  """One run of a `Port` (`shardport.strategies.protocol.StrategyModule`).

  The lockstep checks place a host state in the run's layout through
  `from_host`, from `program_fields` (`to_host`): every leaf from the host,
  none kept from an earlier state, so a step that donates its state never
  meets a buffer it gave away. Both read the run's state through its
  `run_fields.StateView` (`Port.state_views`).
  """

  PROCESS_LOCAL_BATCH = False
  STEP_TAKES_HOST_LOCAL = False
  STACKED = False  # a copy of the state per device, stacked (pmap's)
  # The side's step of a `DeviceEvaluation`.
  EVALUATION_STEP = "port_step"

  def __init__(self, port, state, step, view=None):
    self._port, self._state, self._step = port, state, step
    self._view = view or run_fields.AS_HELD

  def make_train_step(self, config, placement, variant):
    del config, placement, variant
    return self._step

  def make_evaluate(self, config, placement):
    """The side's own evaluation step on the devices, where the Port has
    one (`device_evaluation`); else metrics of the state fetched to the
    host (none: the train loss is judged instead)."""
    del config, placement
    if self._port.device_evaluation is not None:
      return getattr(self._port.device_evaluation, self.EVALUATION_STEP)
    evaluate = self.evaluation()
    return lambda state, batch: ({} if evaluate is None else {
        k: float(v) for k, v in evaluate(self.host_state(state)).items()})

  def evaluation(self):
    """The Port's evaluation this run's side uses: pmap's (`evaluate`)."""
    return self._port.evaluate

  def to_host(self, state):
    # Copies: on XLA:CPU a fetched array can be a view of the device's
    # buffer, which would keep the state alive and stop a donating step
    # from donating it.
    return jax.tree.map(np.array, jax.device_get(
        program_fields(self._view.compared(self.host_state(state)))))

  def host_view(self, state):
    """`to_host`'s fields left on the devices, each read as the engine
    compares it (`host_copies.DeviceLeaf`): no host copy of the state."""
    return jax.tree.map(lambda x: host_copies.device_leaf(x, self.STACKED),
                        program_fields(self._view.compared(state)))

  def create_state(self, seed, config, placement):
    del seed, config
    return self.place(self._state, placement)

  def from_host(self, host, placement, like, step, calls_per_step=1):
    """`to_host`'s fields as a state in this run's layout: every leaf from
    the host, on the run's initial state through its view (`like`, `step`,
    `calls_per_step`: the engine's, for programs that place their own
    canonical view; the view places this one)."""
    del like, step, calls_per_step
    compared = self._view.compared(self._state).replace(**host)
    return self.place(self._view.placed(compared, self._state), placement)


class PmapRun(_Run):
  """The classic step: a copy of the state per device, batch split. In many
  processes each runs pmap over its own devices on its rows of the batch,
  as multi-host pmap programs do."""

  VARIANTS = ("pmap",)
  EVALUATION_STEP = "pmap_step"
  BACKEND = pmap_devices.BACKEND
  CHECKPOINTS = pmap_devices
  PROCESS_LOCAL_BATCH = True
  STEP_TAKES_HOST_LOCAL = True
  STACKED = True

  def make_placement(self, n_devices):
    del n_devices
    return [d for d in self._port.mesh.devices.flat
            if d.process_index == jax.process_index()]

  def place(self, state, placement):
    return conversions.replicate(state, placement)

  def put_batch(self, batch, placement):
    return conversions.to_devices(
        conversions.split_batch(batch, len(placement)), placement)

  def host_state(self, state):
    return conversions.unreplicate(state)

  def metrics_to_host(self, metrics):
    """Per-device values averaged (equal where the step pmean'd them), as a
    dict (`adapt.metrics_dict`)."""
    return jax.tree.map(lambda x: np.mean(np.asarray(x), axis=0)
                        if np.ndim(x) else np.asarray(x),
                        jax.device_get(adapt.metrics_dict(metrics)))


class ShardedPmapRun(PmapRun):
  """pmap's state as per-device shards (`Port.pmap_specs`): each split leaf
  one piece per device, stacked, and joined again to compare."""

  def __init__(self, port, state, step, view=None, *, split):
    super().__init__(port, state, step, view)
    self._split = split

  @property
  def CHECKPOINTS(self):  # pylint: disable=invalid-name
    """Whole leaves in the checkpoint (`--switch-at`), split again on
    restore: the layout of the saved fields' pieces."""
    axes = jax.tree.unflatten(jax.tree.structure(self._state), [
        pmap_shards.Checkpoints.REPLICATED if a is None else a
        for a in self._split])
    return pmap_shards.Checkpoints(checkpoints.saved_fields(axes),
                                   self._port.mesh)

  def place(self, state, placement):
    return pmap_shards.place(state, self._split, self._port.mesh, placement)

  def host_state(self, state):
    return pmap_shards.join(state, self._split)

  def host_view(self, state):
    """The whole leaves, joined on the host: no one device holds them."""
    return self.to_host(state)


class BroadcastPmapRun(PmapRun):
  """The new pmap style (`in_axes=None, out_axes=None` for the state): one
  state broadcast to every device, not a stacked copy per device: in many
  processes too, one logical copy replicated over the mesh, which each
  process's pmap takes on its own devices."""

  CHECKPOINTS = mesh_devices
  STACKED = False

  def place(self, state, placement):
    del placement
    return conversions.to_mesh(state, self._port.mesh)

  def host_state(self, state):
    return jax.device_get(state)


class MeshRun(_Run):
  """The port: the state replicated on the mesh, the batch split over it."""

  VARIANTS = ("port",)
  BACKEND = mesh_devices.BACKEND
  CHECKPOINTS = mesh_devices

  def make_placement(self, n_devices):
    del n_devices
    return self._port.mesh

  def place(self, state, placement):
    return conversions.to_mesh(state, placement, self._port.port_specs)

  def put_batch(self, batch, placement):
    return conversions.shard_batch(batch, placement)

  def evaluation(self):
    """The port's own evaluation where it has one (`port_evaluate`)."""
    return self._port.port_evaluate or self._port.evaluate

  def host_state(self, state):
    """On the host, a leaf split over many processes gathered
    (`host_copies.fetch`)."""
    return jax.tree.map(host_copies.fetch, state)

  def metrics_to_host(self, metrics):
    return jax.device_get(adapt.metrics_dict(metrics))


class BaselineRun(MeshRun):
  """A port-side `Baseline`: another program on the mesh, its state placed
  by its own specs, evaluated by its own step where it has one (a
  pmap-side one runs as pmap's run does: `plan`)."""

  def __init__(self, port, state, step, view=None, *, baseline):
    super().__init__(port, state, step, view)
    self._baseline = baseline

  def place(self, state, placement):
    return conversions.to_mesh(state, placement, self._baseline.specs)

  def make_evaluate(self, config, placement):
    if self._baseline.evaluation_step is not None:  # only with a
      return self._baseline.evaluation_step        # device_evaluation
    return super().make_evaluate(config, placement)

  def evaluation(self):
    """No port's own evaluation: pmap's (`evaluate`)."""
    return self._port.evaluate


class ReferenceRun(MeshRun):
  """The optional ground truth: one device, the whole global batch."""

  VARIANTS = ("reference",)
  EVALUATION_STEP = "reference_step"
  BACKEND = "reference"
  CHECKPOINTS = None

  def make_placement(self, n_devices):
    del n_devices
    return OneDevice(jax.local_devices()[0], self._port.mesh.size)

  def place(self, state, placement):
    return jax.device_put(state, placement.device)

  def put_batch(self, batch, placement):
    return jax.device_put(batch, placement.device)

  def evaluation(self):
    """The reference is pmap's program on one device: pmap's evaluation."""
    return self._port.evaluate


# Where the Port evaluates: a mistake the end-of-run check must catch.
EVALUATION_CONTROL = controls.NegativeControl(
    "evaluation-1pct", "every metric of the port's evaluation x 1.01 (a "
    "mean over the wrong count)", controls.evaluation_1pct_all)


def plan(checked, calibration_runs: int = 0) -> Plan:
  """A checked `Port` (`port.check`) as the engine runs and judges it.

  By the same rules as our strategies but with none of their assumptions:
  no canonical view, data set, test set or truth of ours applies to a
  team's program. pmap's run, one per port step, and the reference where
  the Port has one (then the truth: one device, no collective to get
  wrong; else pmap is).

  Args:
    checked: the `port.check`ed Port.
    calibration_runs: free-running calibration runs asked for (0 to 3).

  Returns:
    The `Plan`.
  """
  port, state, batches = checked.port, checked.state, checked.batches
  held = isinstance(state, adapt.HeldState)

  def run(kind, name, state, step):
    calls = (port.calls_per_step or {}).get(name, 1)
    return PlannedRun(name, kind(port, state, step, run_fields.view(
        port, name, held)), name, calls)

  ports = {port.port_name: port.port_step, **(port.extra_ports or {})}
  runs = [run(_pmap(checked.pmap_layout, checked.pmap_split), "pmap", state,
              port.pmap_step),
          *(run(MeshRun, name, checked.port_state, step)
            for name, step in ports.items()),
          *(run(_pmap(checked.baseline_layouts.get(name)) if
                baseline.side == "pmap" else functools.partial(
                    BaselineRun, baseline=baseline), name,
                checked.baseline_states[name], baseline.step)
            for name, baseline in (port.baselines or {}).items())]
  truth = "pmap"
  pairs = tuple((name, "pmap") for name in ports)
  if port.reference_step is not None:
    runs.append(run(ReferenceRun, "reference", checked.reference_state,
                    port.reference_step))
    truth = "reference"
    pairs = (*pairs, ("pmap", "reference"),
             *((name, "reference") for name in ports))
  evaluates = port.evaluate or port.device_evaluation
  return Plan(
      name=port.name, runs=tuple(runs), truth=truth,
      pairs=pairs if port.pairs is None else tuple(port.pairs),
      witness="pmap", port_runs=tuple(ports),
      tolerances={"first_step": FIRST_STEP, "final": FINAL},
      throughput_pair=("pmap", port.port_name),
      train_batches=lambda: (batches(i) for i in range(port.steps)),
      timing_batches=batches.first,
      # The train loss (or the evaluation) recorded ten times a run.
      eval_every=max(1, port.steps // 10),
      **port_judging.evaluation(port, state),
      **port_judging.calibration(port, truth, batches(0),
                                   calibration_runs),
      negative_controls=(*controls.late_controls(),
                         *((EVALUATION_CONTROL,) if evaluates else ())))


def _pmap(layout, split=None):
  """The pmap run of a state in `layout` (`port_steps.STACKED` or not), in
  pieces where `split` (`Checked.pmap_split`) says so."""
  if split is not None:
    return functools.partial(ShardedPmapRun, split=split)
  return PmapRun if layout == port_steps.STACKED else BroadcastPmapRun


def config_of(checked) -> PortConfig:
  """What the runner reads of a config, for a checked `Port`."""
  return PortConfig("team program", checked.port.steps, checked.rows)
