"""ensemble_data: the nested pmap, and the shard_map and jit ports on a 2-D
mesh, against the per-member reference.

jax 0.10 refuses a pmap inside a pmap: there the pmap run is skipped, the
report quoting the error it raises, and the ports are checked against the
reference alone. On the original runtime (jax 0.9.2 with
JAX_PMAP_SHMAP_MERGE=0) all four runs train.
"""

from compare._src import negative_controls as controls
from compare._src.reference import ensemble_data as reference
from compare._src.strategies.base import NegativeControl
from compare._src.strategies.base import RunSpec
from compare._src.strategies.base import Strategy
from compare._src.strategies.ensemble import Ensemble
from compare._src.tolerances import Tolerance
from legacy_pmap import ensemble_data as legacy
from sharded import devices
from sharded import ensemble_data as port
from shardport.training.programs import EnsembleDataProgram


class EnsembleData(EnsembleDataProgram, Strategy):
  """M ensemble members, each trained data-parallel over D devices."""

  loss_convention = Ensemble.loss_convention
  runs = (RunSpec("pmap", legacy, "pmap"),
          RunSpec("shard_map", port, "shard_map"),
          RunSpec("jit", port, "jit"),
          RunSpec("reference", reference, "reference"))
  pairs = (("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference"), ("jit", "reference"))
  tolerances = {
      "first_step": Tolerance(rtol=1e-5, atol=1e-5, reason=(
          "Each member's gradient is the mean of its D devices' slice means "
          "on the ports, one mean over the whole batch on the reference: "
          "only the summation order differs, as for data_parallel (the jit "
          "port also batches the members' convolutions). Measured at most "
          "4.3e-7 of max|leaf| after one step, 1, 2, 4 and 8 members on 8 "
          "devices, both ports; bitwise with one device per member (D = 1, "
          "shard_map), and the nested pmap bitwise equal to shard_map on "
          "the original runtime. 1e-5 leaves 20x headroom and is 1000x "
          "below a 1% learning-rate change (1e-2); the wrong-axis mistake "
          "is 2.1 of max|leaf|.")),
      "final": Tolerance(rtol=1e-3, atol=1e-3, reason=(
          "Shown, not judged: lr 0.1 with momentum 0.9 grows rounding "
          "differences chaotically (2.2e-3 and 6.5e-3 abs for shard_map and "
          "jit after the default 77 steps, 2 members, inside the "
          "calibration band), so a pair that is not bitwise is judged "
          "against the calibration curve.")),
  }
  negative_controls = (
      NegativeControl("wrong-axis", "the port's pmeans over `members` where "
                      "they belong over `data`: each member's gradient (and "
                      "reported loss) averaged with the other members' on "
                      "the same shard",
                      controls.pmean_over(devices.DATA_AXIS,
                                          devices.MEMBERS_AXIS)),
      NegativeControl("members-mixed", "each member starts from its "
                      "neighbour's initial state", controls.members_mixed),
      NegativeControl("lr-1pct", "the port's learning rate x 1.01",
                      controls.learning_rate_1pct),
      *controls.late_controls(member=0),
  )

  def active_runs(self, config, n_devices):
    """The runs whose program runs on this jax (each module declares it:
    the nested pmap does not on jax >= 0.10)."""
    del config, n_devices
    return tuple(run.name for run in self.runs
                 if run.module.why_unavailable() is None)

  def why_skipped(self, config, n_devices):
    """The error the skipped runs' programs raise here, quoted."""
    del config, n_devices
    return "; ".join(dict.fromkeys(
        run.module.why_unavailable() for run in self.runs
        if run.module.why_unavailable() is not None))

  def report_fields(self, config):
    return {"members": config.members, "epochs": config.epochs}

  def report_lines(self, report):
    """The mesh, then the ensemble's test accuracy beside its members'."""
    members = report["members"]
    return [f"mesh: {members} members x {report['devices'] // members} data "
            "devices, each member's batch split over its row",
            *Ensemble.report_lines(self, report)]

  def plot(self, report, path):
    """The ensemble's curves, every member's test accuracy drawn thin."""
    Ensemble.plot(self, report, path)
