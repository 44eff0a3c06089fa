"""`--plot PATH`: the verdict, the learning curves, the drift against the
calibration band and each lockstep step against its allowance, on one
screen (2 x 2 panels).

Runs that coincide are told apart by line style and marker, not hidden
behind one another; a pair that is bitwise is named as such in its panel
instead of being drawn at an arbitrary floor.
"""

import numpy as np

from shardport.launch import files

# Line styles and markers cycled over the runs: overlapping curves stay
# distinguishable.
_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ("-", "v"))


def _style(index):
  line, marker = _STYLES[index % len(_STYLES)]
  return {"color": f"C{index}", "linestyle": line, "marker": marker,
          "markevery": 0.1, "markersize": 4,
          "linewidth": 2.2 - 0.4 * (index % 4)}


def _note(axis, lines):
  """Text in the panel's corner (what is not drawn, and why)."""
  if lines:
    axis.text(0.02, 0.02, "\n".join(lines), transform=axis.transAxes,
              fontsize="small", va="bottom",
              bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})


def _curves(axes, report, members):
  loss, accuracy = axes
  for index, (name, run) in enumerate(report["runs"].items()):
    style = _style(index)
    loss.plot(np.arange(1, len(run["losses"]) + 1), run["losses"],
              label=name, **style)
    history = run.get("history", [])
    steps = [entry["step"] for entry in history]
    accuracy.plot(steps, [entry.get("test_accuracy") for entry in history],
                  label=name, **{**style, "markevery": 1})
    if members and history and "member_accuracy" in history[0]:
      member_curves = np.array([entry["member_accuracy"] for entry in history])
      accuracy.plot(steps, member_curves, color=style["color"], alpha=0.25,
                    linewidth=0.8)
  loss.set(xlabel="step", ylabel="train loss (as the program reports it)",
           yscale="log", title="training loss")
  accuracy.set(xlabel="step", ylabel="test accuracy",
               title="test accuracy at each evaluation"
               + (" (thin: members)" if members else ""))
  loss.legend(fontsize="small")


def _drift(axis, report):
  calibration = (report.get("calibration") or {}).get("drift_per_step", [])
  steps = np.arange(1, len(calibration) + 1)
  bitwise = []
  for index, v in enumerate(report["equivalence"]):
    if v["at"] != "final":
      continue
    if v["verdict"] == "bitwise":
      bitwise.append(f"{v['a']} vs {v['b']}: bitwise, no drift")
      continue
    drift = np.maximum(v["drift_per_step"], 1e-12)
    axis.plot(np.arange(1, len(drift) + 1), drift,
              label=f"{v['a']} vs {v['b']}", **_style(index))
  if calibration:
    multiple = next((v["calibration"]["multiple"] for v in report["equivalence"]
                     if v.get("calibration")), 1.0)
    envelope = np.maximum.accumulate(np.maximum(calibration, 1e-12))
    axis.fill_between(steps, 1e-12, multiple * envelope, color="grey",
                      alpha=0.25, label=f"calibration band x{multiple:g}")
    axis.plot(steps, np.maximum(calibration, 1e-12), "k:", linewidth=1,
              label="calibration")
  axis.set(xlabel="step", ylabel="max |params| difference", yscale="log",
           title="free-running drift (shown, not judged)")
  axis.legend(fontsize="small", loc="upper left")
  _note(axis, bitwise)


def _lockstep(axis, report):
  """Each pair's step from the shared state over the one-step band."""
  checks = report.get("lockstep") or {}
  if not checks.get("checked_steps"):
    axis.set_axis_off()
    return
  bitwise = []
  for index, (name, pair) in enumerate(checks["pairs"].items()):
    if "ratios" in pair:
      ratios = np.asarray(pair["ratios"], np.float64)
    else:  # a report from before the leaf bands: one band per step
      ratios = np.asarray(pair["errors"], np.float64) / np.maximum(
          np.asarray(checks["band_per_step"], np.float64), 1e-30)
    label = name.replace("~", " vs ")
    if not np.any(ratios):
      bitwise.append(f"{label}: bitwise at every step")
      continue
    axis.plot(checks["steps"], np.maximum(ratios, 1e-3), label=label,
              **_style(index))
  axis.axhline(checks["multiple"], color="r", linestyle="--", linewidth=2,
               label=f"allowed: {checks['multiple']:g}x the band")
  axis.set(xlabel="step", ylabel="difference / one-step band", yscale="log",
           title="lockstep (judged): each step from one shared state")
  axis.set_ylim(top=max(axis.get_ylim()[1], checks["multiple"] * 3))
  axis.legend(fontsize="small", loc="upper right", framealpha=0.9)
  _note(axis, bitwise)


def learning_curves(report: dict, path: str, members: bool = False) -> None:
  """Writes the verdict and four panels (loss, test accuracy, drift,
  lockstep) as a PNG of 12 x 8 inches, atomically.

  Args:
    report: the report dict of `python -m compare`.
    path: where the PNG goes.
    members: draw every ensemble member's test accuracy too.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  figure, axes = plt.subplots(2, 2, figsize=(12, 8))
  _curves(axes[0], report, members)
  _drift(axes[1][0], report)
  _lockstep(axes[1][1], report)
  failure = report.get("first_failure")
  figure.suptitle(f"VERDICT: {report['verdict'].upper()}"
                  + (f" ({failure})" if failure else "")
                  + f"\n{report['strategy']} / {report['workload']} on "
                  f"{report['dataset']}, {report['devices']} "
                  f"{report['platform']} devices, {report['steps']} steps",
                  color="darkgreen" if report["verdict"] == "pass"
                  else "darkred", fontsize="large")
  figure.tight_layout()
  try:
    with files.replaced_atomically(path, suffix=".png") as partial:
      figure.savefig(partial, dpi=100)
  finally:
    plt.close(figure)
