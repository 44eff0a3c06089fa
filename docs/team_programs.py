"""Team programs written elsewhere, proved in one run: the appendix's table.

    python -m docs.team_programs --json docs/measured/team_programs.json

Each program of examples/team_programs (written the way teams write them,
not to fit the harness) is proved as a team would prove it (`compare.prove`,
8 emulated CPU devices): its correct port, each of its wrong ports, and the
correct port with a 1% change of the update planted at step 1, at a late
step only, and from that step on. Every entry records the verdict, the step
of the first failure and its line, and how many leaves the lockstep judged
(the leaves left unjudged, rounding through and through, by name).
"""

import argparse
import importlib
import sys
import time

from shardport.launch import emulation

# Program -> (module, keyword arguments of its `port`).
PROGRAMS = {
    "linen_conv_bn": ("linen_conv_bn", {}),
    # The plants count optimiser steps, 4 calls each here (`LATE_MULTISTEPS`).
    "linen_conv_bn_multisteps": ("linen_conv_bn", {"multi_steps": 4}),
    "nnx_bn_dropout": ("nnx_bn_dropout", {}),
    "equinox_bn": ("equinox_bn", {}),
    "stax_optimizers": ("stax_optimizers", {}),
    "static_flag_donate": ("static_flag_donate", {}),
    "own_optimizer": ("own_optimizer", {}),
    "linen_lm_dropout": ("linen_lm_dropout", {}),
    "ema_clip": ("ema_clip", {}),
    "scan_accumulation": ("scan_accumulation", {}),
}
STEPS = 10
LATE = 8
# Under optax.MultiSteps(k=4) 10 calls are 2 optimiser steps: the late
# plants act at the second (its 8th call).
LATE_MULTISTEPS = 2


def controls(kwargs) -> tuple[str, str, str]:
  """The three plants of a program: at step 1, at a late step only, and
  from it on (steps as the plants count them: optimiser steps)."""
  late = LATE_MULTISTEPS if kwargs.get("multi_steps") else LATE
  return ("update-1pct-at:1", f"update-1pct-at:{late}",
          f"update-1pct-from:{late}")


def _entry(proof, seconds):
  failure = proof.first_failure
  checks = proof.report.get("lockstep") or {}
  return {"verdict": proof.verdict,
          "first_fail_step": (None if failure is None else int(
              failure.split("first at step ")[1].split(":")[0])
                              if failure.startswith("first at step ")
                              else None),
          "first_failure": failure,
          "judged_leaves": checks.get("judged_leaves"),
          "leaves": checks.get("leaves"),
          "unjudged_leaves": sorted(checks.get("unjudged_leaves") or {}),
          "seconds": round(seconds, 1)}


def run(names) -> dict:
  """Every run of every program in `names`: `{program: {run: entry}}`."""
  import compare  # pylint: disable=g-import-not-at-top
  out = {}
  for name in names:
    module_name, kwargs = PROGRAMS[name]
    module = importlib.import_module(f"examples.team_programs.{module_name}")
    plan = [(None, None)] + [(w, None) for w in module.WRONG] + [
        (None, c) for c in controls(kwargs)]
    out[name] = {}
    for wrong, control in plan:
      start = time.perf_counter()
      proof = compare.prove(module.port(wrong, steps=STEPS, **kwargs),
                            control=control, windows=1)
      label = wrong or control or "correct"
      out[name][label] = _entry(proof, time.perf_counter() - start)
      print(f"{name:26} {label:22} {proof.verdict:5} "
            f"{proof.first_failure or ''}"[:160], flush=True)
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m docs.team_programs",
      description="Proves every team program of examples/team_programs, "
                  "its wrong ports and its planted controls, in one run.")
  parser.add_argument("--json", required=True, metavar="PATH",
                      help="where to write the results")
  parser.add_argument("--programs", default=",".join(PROGRAMS),
                      help="comma-separated subset (default: all)")
  args = parser.parse_args(argv)
  names = args.programs.split(",")
  unknown = sorted(set(names) - set(PROGRAMS))
  if unknown:
    print(f"team_programs: error: --programs: unknown {unknown}",
          file=sys.stderr)
    return 2
  emulation.set_cpu_device_count(8)
  from shardport.launch import files  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  files.write_json({"steps": STEPS, "late_step": LATE,
                    "jax_version": jax.__version__,
                    "programs": run(names)}, args.json)
  return 0


if __name__ == "__main__":
  sys.exit(main())
