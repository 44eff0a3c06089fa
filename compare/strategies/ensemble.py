"""ensemble: pmap and the shard_map port against the per-member reference.

pmap runs only where the ensemble has exactly one member per device; with
several members per device (`--members 16` on 8 devices) the port is checked
against the reference alone.
"""

import dataclasses
import os

import numpy as np

from compare.reference import ensemble as reference
from compare.strategies import RunSpec
from compare.strategies import StrategySpec
from legacy_pmap import ensemble as legacy
from sharded import ensemble as port
from workloads import batches
from workloads import configs
from workloads import registry


def _steps_per_epoch(config, n_train):
  return n_train // config.global_batch


def make_config(options, data):
  """An `EnsembleConfig` from CLI options; `--epochs` sets the steps.

  `--steps`, when given, overrides `--epochs`.

  Raises:
    registry.WorkloadError: for a workload other than the CNN.
    batches.BatchError: for a batch larger than the training set.
    configs.ConfigError: for an unknown member loop.
  """
  if options["workload"] != "cnn":
    raise registry.WorkloadError(
        f"the ensemble trains CNNs; --workload {options['workload']} is not "
        "one of them")
  fields = {f.name for f in dataclasses.fields(configs.EnsembleConfig)}
  given = {k: v for k, v in options.items() if k in fields and v is not None}
  config = configs.EnsembleConfig(
      **{**given, "dataset": data.name,
         "input_shape": tuple(data.train_inputs.shape[1:])})
  per_epoch = _steps_per_epoch(config, len(data.train_inputs))
  if per_epoch < 1:
    raise batches.BatchError(
        f"global batch {config.global_batch} exceeds the "
        f"{len(data.train_inputs)} training examples")
  if config.member_loop not in port.MEMBER_LOOPS:
    raise configs.ConfigError(
        f"unknown --member-loop {config.member_loop!r}; choose one of "
        f"{', '.join(port.MEMBER_LOOPS)}")
  if "steps" not in given:
    config = dataclasses.replace(config, steps=config.epochs * per_epoch)
  return config


def active_runs(config, n_devices):
  """pmap only with one member per device; the port and reference always."""
  if config.members == n_devices:
    return ("pmap", "shard_map", "reference")
  return ("shard_map", "reference")


def why_skipped(config, n_devices):
  return (f"pmap runs exactly one member per device ({config.members} "
          f"members on {n_devices} devices); the port runs "
          f"{config.members // n_devices} per device")


def summarize(sums, config):
  """The ensemble's test accuracy beside every member's.

  `test_loss` is the members' mean test loss (the classic program logs
  member 0's); `test_accuracy` is the ensemble's, as the classic program
  reports it.
  """
  del config
  count = float(sums["count"])
  members = np.asarray(sums["member_correct"], np.float64) / count
  ensemble_accuracy = float(sums["ensemble_correct"]) / count
  return {"test_loss": float(np.mean(sums["member_loss_sum"])) / count,
          "test_accuracy": ensemble_accuracy,
          "ensemble_accuracy": ensemble_accuracy,
          "member_accuracy": [round(float(a), 6) for a in members],
          "mean_member_accuracy": float(members.mean()),
          "best_member_accuracy": float(members.max())}


def eval_every(config, n_train):
  """Evaluates after every epoch, as the classic program logs."""
  return _steps_per_epoch(config, n_train)


def extra_report(config):
  return {"members": config.members, "epochs": config.epochs}


def plot(report, path):
  """Per-epoch test accuracy of members and ensemble, and each run's speed."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  figure, (curves, speeds) = plt.subplots(
      1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1]})
  styles = {"pmap": "-", "shard_map": "--", "reference": ":"}
  for index, (name, run) in enumerate(report["runs"].items()):
    history = run.get("history", [])
    if not history:
      continue
    steps = [entry["step"] for entry in history]
    color = f"C{index}"
    members = np.array([entry["member_accuracy"] for entry in history])
    for m in range(members.shape[1]):
      curves.plot(steps, members[:, m], styles.get(name, "-"), color=color,
                  alpha=0.3, linewidth=1)
    curves.plot(steps, [entry["ensemble_accuracy"] for entry in history],
                styles.get(name, "-"), color=color, linewidth=2.5,
                label=f"{name}: ensemble (thin: members)")
  curves.set(xlabel="step (one evaluation per epoch)", ylabel="test accuracy",
             title=f"{report['members']} members on {report['dataset']}")
  curves.legend(loc="lower right")
  names = list(report["runs"])
  rates = [report["runs"][n]["examples_per_s"] for n in names]
  spread = np.array([report["runs"][n]["examples_per_s_spread"]
                     for n in names]).T
  speeds.bar(names, rates, color=[f"C{i}" for i in range(len(names))],
             yerr=np.abs(spread - rates), capsize=4)
  speeds.set(ylabel="examples/s (median, min-max)",
             title=f"{report['devices']} {report['platform']} devices")
  figure.tight_layout()
  # Written beside the target and renamed, so a failure leaves no half PNG.
  partial = f"{path}.partial.png"
  figure.savefig(partial, dpi=100)
  plt.close(figure)
  os.replace(partial, path)


SPEC = StrategySpec(
    name="ensemble",
    runs=(RunSpec("pmap", legacy, "pmap"),
          RunSpec("shard_map", port, "shard_map"),
          RunSpec("reference", reference, "reference")),
    pairs=(("pmap", "shard_map"), ("pmap", "reference"),
           ("shard_map", "reference")),
    make_config=make_config,
    active_runs=active_runs,
    why_skipped=why_skipped,
    summarize=summarize,
    eval_every=eval_every,
    extra_report=extra_report,
    plot=plot,
)
