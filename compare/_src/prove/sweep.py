"""`--sweep-devices 1,2,4,8`: the same comparison on several device counts.

Every point trains and times every run on the first N devices, so the sweep
shows how each backend scales and what its collectives cost as N grows. On
emulated CPU devices every device shares the same host cores: the curve
measures overhead (dispatch, collectives, partitioning), not the speedup of
real accelerators.
"""

import os

from compare._src.prove import matmul_precision
from compare._src.prove import outcome


def parse(text: str) -> tuple[int, ...]:
  """`"1,2,4,8"` to `(1, 2, 4, 8)`; ValueError (one line) for anything else."""
  try:
    counts = tuple(int(part) for part in text.split(","))
  except ValueError:
    raise ValueError(f"--sweep-devices takes counts like 1,2,4,8, got "
                     f"{text!r}") from None
  if not counts or min(counts) < 1:
    raise ValueError(f"--sweep-devices counts must be at least 1, got {text}")
  return counts


def _point(report, n_devices):
  runs = {}
  for name, run in report["runs"].items():
    runs[name] = {key: run.get(key) for key in (
        "examples_per_s", "examples_per_s_spread", "compile_s",
        "all_reduce_bytes", "collective_bytes_per_step", "achieved_gflops",
        "state_digest")}
  return {"devices": n_devices, "runs": runs, "verdict": report["verdict"]}


def run(plans: dict, config, windows: int) -> dict:
  """Compares every run at each device count; the per-count results.

  Args:
    plans: `{device count: plan.Plan}`, each with its control planted.
    config: the program's config.
    windows: timing windows per run.
  """
  import jax  # pylint: disable=g-import-not-at-top
  precision, fields = matmul_precision.for_proof(jax.devices()[0].platform)
  with precision:
    points = [_point(outcome.compare(plan, config, n, windows=windows), n)
              for n, plan in plans.items()]
  verdicts = {p["verdict"] for p in points}
  overall = ("diverged" if "diverged" in verdicts else
             "fail" if "fail" in verdicts else "pass")
  return {"sweep": points, "verdict": overall, **fields}


def other_collective_bytes(run: dict) -> int:
  """Bytes of one step's collectives but its all-reduces: all-gathers,
  reduce-scatters, all-to-alls, permutes (unsharded sizes)."""
  sizes = run.get("collective_bytes_per_step") or {}
  return sum(size for op, size in sizes.items() if op != "all-reduce")


def collective_bytes(run: dict) -> int:
  """Bytes of every collective one step runs."""
  return (run.get("all_reduce_bytes") or 0) + other_collective_bytes(run)


def table(result: dict) -> list[str]:
  """One line per device count and run."""
  head = (f"{'devices':>7} {'run':<13} {'examples/s':>11} {'compile s':>9} "
          f"{'all-reduce B/step':>17} {'other coll. B/step':>18} verdict")
  lines = [head, "-" * len(head)]
  for point in result["sweep"]:
    for name, run in point["runs"].items():
      rate = run["examples_per_s"]
      lines.append(
          f"{point['devices']:>7} {name:<13} "
          f"{'-' if rate is None else f'{rate:.0f}':>11} "
          f"{run['compile_s']:>9.2f} {run.get('all_reduce_bytes') or 0:>17} "
          f"{other_collective_bytes(run):>18} {point['verdict']}")
  return lines


def plot(result: dict, path: str) -> None:
  """Examples/s and collective bytes per step against the device count."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  figure, (speed, collective) = plt.subplots(1, 2, figsize=(11, 4))
  counts = [p["devices"] for p in result["sweep"]]
  names = dict.fromkeys(n for p in result["sweep"] for n in p["runs"])
  for name in names:
    rates = [p["runs"].get(name, {}).get("examples_per_s") for p in
             result["sweep"]]
    speed.plot(counts, rates, "o-", label=name)
    sizes = [collective_bytes(p["runs"][name]) if name in p["runs"] else None
             for p in result["sweep"]]
    collective.plot(counts, sizes, "o-", label=name)
  speed.set(xscale="log", xlabel="devices", ylabel="examples/s",
            title="throughput (emulated devices share the host's cores)")
  collective.set(xscale="log", xlabel="devices",
                 ylabel="collective bytes per step", title="collectives")
  for axis in (speed, collective):
    axis.set_xticks(counts, [str(c) for c in counts])
    axis.minorticks_off()  # the log axis's minor labels read "3x10^0"
    axis.legend(fontsize="small")
  figure.tight_layout()
  partial = f"{path}.partial.png"
  figure.savefig(partial, dpi=100)
  plt.close(figure)
  os.replace(partial, path)
