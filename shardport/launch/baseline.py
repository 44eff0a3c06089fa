"""`--baseline`: the same command again in one process with all the devices.

A job of P processes x D devices is paired with 1 x (P*D), run one after the
other in the same invocation: the pair's examples/s ratio and whether every
run ends with the same state digest are added to the job's JSON.
"""

import json
import os
import shutil
import sys
import tempfile

from shardport.launch import files
from shardport.launch import launcher


def _load(path):
  with open(path) as f:
    return json.load(f)


def compare_baseline(multi: dict, single: dict) -> tuple[dict, list[str]]:
  """`python -m compare` reports of P x D and 1 x (P*D): fields and lines."""
  runs = {}
  for name, run in multi["runs"].items():
    base = single["runs"].get(name, {})
    rate, base_rate = run.get("examples_per_s"), base.get("examples_per_s")
    runs[name] = {
        "examples_per_s": rate, "baseline_examples_per_s": base_rate,
        "examples_per_s_ratio": (rate / base_rate if rate and base_rate
                                 else None),
        "state_digest": run["state_digest"],
        "same_state_digest": run["state_digest"] == base.get("state_digest")}
  fields = {"processes": 1, "devices": single["devices"],
            "verdict": single["verdict"], "runs": runs,
            "same_state_digests": all(r["same_state_digest"]
                                      for r in runs.values())}
  return fields, _lines(multi, single, runs)


def train_baseline(multi: dict, single: dict) -> tuple[dict, list[str]]:
  """Training programs' results of P x D and 1 x (P*D): fields and lines."""
  batch = multi["config"]["global_batch"]
  rate = multi["steps_per_s"] and multi["steps_per_s"] * batch
  base_rate = single["steps_per_s"] and single["steps_per_s"] * batch
  runs = {multi["variant"]: {
      "examples_per_s": rate, "baseline_examples_per_s": base_rate,
      "examples_per_s_ratio": rate / base_rate if rate and base_rate else None,
      "state_digest": multi["state_digest"],
      "same_state_digest": multi["state_digest"] == single["state_digest"]}}
  fields = {"processes": 1, "devices": single["devices"], "runs": runs,
            "same_state_digests": runs[multi["variant"]]["same_state_digest"]}
  return fields, _lines(multi, single, runs)


def _lines(multi, single, runs):
  lines = [f"{multi['processes']} processes x "
           f"{multi['devices'] // multi['processes']} devices against 1 "
           f"process x {single['devices']} devices (run one after the "
           "other in this invocation):"]
  for name, run in runs.items():
    ratio = run["examples_per_s_ratio"]
    lines.append(
        f"  {name:<12} examples/s {run['examples_per_s'] or 0:.0f} vs "
        f"{run['baseline_examples_per_s'] or 0:.0f}: "
        + (f"{ratio:.2f}x" if ratio else "-")
        + f"; state digest {run['state_digest'][:16]} "
        + ("equal" if run["same_state_digest"] else "DIFFERS"))
  return lines


def launch_with_baseline(prog, module, argv, processes, devices, coordinator,
                         normal, result_path, result_argv, kind) -> int:
  """The job, then the same command in 1 process with all the devices.

  Args:
    result_path: where the job writes its JSON (`--json` or
      `WORKDIR/result.json`); the baseline fields are added to it there.
    result_argv: `folder -> (extra argv, result path)`: what sends the
      baseline's result into a fresh `folder`, and where it lands.
    kind: `compare_baseline` or `train_baseline`.

  Returns:
    The job's exit code; 1 when a state digest differs from the
    baseline's.
  """
  rc = launcher.launch(prog, module, argv, processes, devices, coordinator, normal)
  if rc not in (0, 1, 3) or not os.path.exists(result_path):
    return rc
  folder = tempfile.mkdtemp(prefix=f"shardport-{prog}-baseline-")
  try:
    extra, result = result_argv(folder)
    single_rc = launcher.run_single(module, [*argv, *extra], processes * devices,
                           os.path.join(folder, "output.txt"))
    if not os.path.exists(result):
      print(f"{prog}: error: the 1-process baseline failed (exit "
            f"{single_rc}); its output:\n"
            + open(os.path.join(folder, "output.txt")).read()[-2000:],
            file=sys.stderr)
      return rc or 1
    multi = _load(result_path)
    fields, lines = kind(multi, _load(result))
    multi["baseline"] = fields
    files.write_json(multi, result_path)
    print("\n".join(lines), flush=True)
    return rc or (0 if fields["same_state_digests"] else 1)
  finally:
    shutil.rmtree(folder, ignore_errors=True)
