"""`--plot PATH`: learning curves, and the drift against the calibration band."""

import numpy as np

from shardport.launch import files


def _curves(axes, report, members):
  loss, accuracy = axes
  for index, (name, run) in enumerate(report["runs"].items()):
    color = f"C{index}"
    loss.plot(np.arange(1, len(run["losses"]) + 1), run["losses"],
              color=color, label=name, linewidth=1)
    history = run.get("history", [])
    steps = [entry["step"] for entry in history]
    accuracy.plot(steps, [entry.get("test_accuracy") for entry in history],
                  "o-", color=color, label=name, markersize=3)
    if members and history and "member_accuracy" in history[0]:
      member_curves = np.array([entry["member_accuracy"] for entry in history])
      accuracy.plot(steps, member_curves, color=color, alpha=0.25,
                    linewidth=0.8)
  loss.set(xlabel="step", ylabel="train loss", yscale="log",
           title="training loss")
  accuracy.set(xlabel="step", ylabel="test accuracy",
               title="test accuracy" + (" (thin: members)" if members else ""))
  loss.legend()


def _drift(axis, report):
  calibration = report.get("calibration", {}).get("drift_per_step", [])
  steps = np.arange(1, len(calibration) + 1)
  for v in report["equivalence"]:
    if v["at"] == "final" and v["verdict"] != "bitwise":
      drift = np.maximum(v["drift_per_step"], 1e-12)
      axis.plot(np.arange(1, len(drift) + 1), drift,
                label=f"{v['a']} vs {v['b']}")
  if calibration:
    multiple = next((v["calibration"]["multiple"] for v in report["equivalence"]
                     if v.get("calibration")), 1.0)
    envelope = np.maximum.accumulate(np.maximum(calibration, 1e-12))
    axis.fill_between(steps, 1e-12, multiple * envelope, color="grey",
                      alpha=0.25, label=f"calibration band x{multiple:g}")
    axis.plot(steps, np.maximum(calibration, 1e-12), "k:", linewidth=1,
              label="calibration")
  axis.set(xlabel="step", ylabel="max |params| difference", yscale="log",
           title="drift against the reference")
  axis.legend(fontsize="small")


def _lockstep(axis, report):
  """Each pair's step from the shared state over the one-step band."""
  checks = report.get("lockstep") or {}
  if not checks.get("checked_steps"):
    axis.set_axis_off()
    return
  for name, pair in checks["pairs"].items():
    ratios = np.maximum(np.asarray(pair["ratios"], np.float64), 1e-3)
    axis.plot(checks["steps"], ratios, label=name.replace("~", " vs "))
  axis.axhline(checks["multiple"], color="r", linestyle="--",
               label=f"allowed x{checks['multiple']:g}")
  axis.set(xlabel="step", ylabel="difference / one-step band", yscale="log",
           title="lockstep: each step from the shared state")
  axis.legend(fontsize="small")


def learning_curves(report: dict, path: str, members: bool = False) -> None:
  """Writes loss, test accuracy, drift and lockstep panels as a PNG,
  atomically.

  Args:
    report: the report dict of `python -m compare`.
    path: where the PNG goes.
    members: draw every ensemble member's test accuracy too.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  figure, axes = plt.subplots(1, 4, figsize=(21, 4.5))
  _curves(axes[:2], report, members)
  _drift(axes[2], report)
  _lockstep(axes[3], report)
  figure.suptitle(f"{report['strategy']} / {report['workload']} on "
                  f"{report['dataset']}, {report['devices']} "
                  f"{report['platform']} devices: verdict {report['verdict']}")
  figure.tight_layout()
  try:
    with files.replaced_atomically(path, suffix=".png") as partial:
      figure.savefig(partial, dpi=100)
  finally:
    plt.close(figure)
