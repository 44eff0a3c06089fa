"""Rounding flips: which steps two programs may part at over the band.

A pair of two programs (pmap and the one-device reference) can part at a
checked step by a rounding flip: a ReLU input, or a sign-like update's
input, within the two programs' rounding of zero. One rule (`over_and_
excused`) decides, for the lockstep verdict and the first step
(`first_step_flip`), which steps over the band are excused: both runs took
a step no plant can have changed (`witnessed`), and no more of them than
`leaf_bands.flip_limit`, past those seen to fall back under nudged retakes
(`fell_back`, up to `leaf_bands.nudged_limit`).
"""

import numpy as np


def first_step_flip(checks, a, b) -> bool:
  """Whether the pair's first step, over the band, is a rounding flip by
  lockstep's rule (`over_and_excused`). Where neither run starts step 1
  apart from the truth's initial state, the first step is lockstep's step
  1: the same states and leaf bands, so the same verdict. (AdamW's first update is
  about `lr * sign(g)`: a gradient within rounding of zero moves a whole
  step either way; the calibration's flip there is left out of the band,
  `lockstep.band_of`, and without lockstep's excuse the first step failed
  a correct port, issue 57.) A run that starts apart (an initial state
  planted wrong) took another step than lockstep's: no excuse."""
  steps = checks.get("steps") or []
  apart = any(1 in checks.get("apart", {}).get(run, ()) for run in (a, b))
  if apart or f"{a}~{b}" not in checks.get("pairs", {}) or 1 not in steps:
    return False
  return steps.index(1) in over_and_excused(checks, a, b)[1]


def witnessed(checks, allowed):
  """`run -> [bool per checked step]`: whether the run took a step that no
  planted mistake can have changed: a run outside the port runs, or a port
  run whose step matched its witness's (pmap's) within `allowed` (a ratio
  to the leaves' own bands), or whose
  step and the truth's, either retaken on its batch nudged by a few ulps,
  matched within it (`compare._src.prove.lockstep.NUDGE_ULPS`: a rounding flip
  fell back, where a mistake stays). A port run with neither is never
  witnessed."""
  def within(errors):
    return [e is not None and e <= allowed for e in errors]

  def of(run):
    if run not in checks.get("port_runs", ()):
      return [True] * checks["checked_steps"]
    none = [None] * checks["checked_steps"]
    by_witness = within(checks.get("witness_ratios", {}).get(run) or none)
    by_nudge = within(checks.get("nudged_ratios", {}).get(run) or none)
    return [w or n for w, n in zip(by_witness, by_nudge)]
  return of


def fell_back(checks, allowed):
  """`run -> [bool per checked step]`: whether the run's step lies within
  `allowed` of the truth's once either is retaken nudged (its own retakes,
  or, for a port run that took its witness's step, the witness's): a
  rounding flip seen to fall back. The truth itself always."""
  def of(run):
    if run == checks.get("truth"):
      return [True] * checks["checked_steps"]
    nudged = checks.get("nudged_ratios", {}).get(run) or [None] * checks[
        "checked_steps"]
    own = [e is not None and e <= allowed for e in nudged]
    witness = checks.get("witness")
    if run not in checks.get("port_runs", ()) or witness in (None, run):
      return own
    took = checks.get("witness_ratios", {}).get(run) or [None] * len(own)
    return [o or (w is not None and w <= allowed and f)
            for o, w, f in zip(own, took, of(witness))]
  return of


def excused(checks, a, b, over, took):
  """The indices among `over` (checked steps over the band) that a rounding
  flip between two programs explains: both runs took a step no plant can
  have changed there. None, where more than `flip_limit` of them did not
  fall back under nudged retakes (`fell_back`), or more than
  `nudged_limit` did. `took`: `witnessed`'s."""
  ok_a, ok_b = took(a), took(b)
  flips = [int(i) for i in over if ok_a[i] and ok_b[i]]
  fell_a, fell_b = (fell_back(checks, checks["multiple"])(run)
                    for run in (a, b))
  # A report from before the rule (no `nudged_limit`): every flip held.
  fell = [i for i in flips if fell_a[i] and fell_b[i]
          and "nudged_limit" in checks]
  held = len(flips) - len(fell)
  return flips if (held <= checks.get("flip_limit", 0) and len(fell) <=
                   checks.get("nudged_limit", 0)) else []


def over_and_excused(checks, a, b):
  """The one rule for rounding flips, for every verdict that judges a step
  against the band (`lockstep`, `first_step`): `(over, flips)`, the
  indices of the checked steps where pair `a~b` lies over the band, and
  those among them a rounding flip between two programs explains."""
  ratios = np.asarray(checks["pairs"][f"{a}~{b}"]["ratios"], np.float64)
  over = np.flatnonzero(ratios > checks["multiple"])
  return over, excused(checks, a, b, over,
                        witnessed(checks, checks["multiple"]))
