"""Each leaf of the state judged against its own one-step band.

The one-step band is how far rounding alone moves a step's result, as a
fraction of the step's update (`compare._src.prove.lockstep`). Measured over the
whole state it is the noisiest leaf's: a bias before a BatchNorm has no true
gradient, so Adam's update of it is normalised rounding noise and its band
is about its whole update (1.18 on examples/team_programs/linen_conv_bn.py),
which hid a 1% mistake in every other leaf. So each leaf has its own band,
the largest its calibration step moved it over the checked steps
(`band_of`, one leaf at a time), and a pair's step is judged leaf
by leaf against it: a noisy leaf loosens only itself.

A leaf whose own band is `UNJUDGEABLE` of its update or more is rounding
through and through: within the band's multiple any mistake in it would
pass, so it is not judged and the report names it with its band.
"""

import numpy as np

# The one-step band never goes below this fraction of a step's update
# (float32 rounds an update to ~6e-8 of itself: this is ~16 ulps of it).
BAND_FLOOR = 1e-6
# A pair of two programs (pmap and the one-device reference, or accumulation
# and data-parallel) may part by a rounding flip at this share of the
# checked steps, and at one step in any run: a ReLU whose input lies within
# rounding of zero for one example takes the other branch in a program that
# computes it in other shapes (docs/jax-facts.md, Equivalence).
FLIP_SHARE = 0.05
# A calibration step whose error stands this many times over the median of
# the checked steps', and at least `CALIBRATION_FLIP_LEVEL`, is a rounding
# flip of its own (the reference's step with its batch nudged by one ulp
# took another ReLU or max-pool branch), not summation order: left out of
# the band, up to `flip_limit` of them, so one flip cannot lift the band to
# where the multiple hides the 1% mistake it exists to catch (6.6e-3 of the
# update at step 28 of examples/resnet on one machine, 940x the median).
CALIBRATION_FLIP = 10.0
# 1e-2 (a 1% mistake) over the multiple, 10: a band below it cannot hide a
# 1% mistake, so it stays, however far over the median (random data's long
# tail: 1.2e-4 to 3.8e-4 at three of 200 steps, 10-33x the median, and a
# correct pair at 1.17x a band that keeps them).
CALIBRATION_FLIP_LEVEL = 1e-3
# Rounding moves the leaf's step by 0.3% of its update or more: a mistake
# of 3% in it would pass within the multiple (10x), so the leaf says
# nothing. Low enough that the floor below stays under 1e-3 of the update.
UNJUDGEABLE = 3e-3
# A leaf is judged against at least this share of the judged leaves'
# largest band: rounding that moves its siblings may move it more in another
# program than in the calibration (one sample a step can leave a small leaf
# bitwise). Measured: accumulation on 2 devices over 200 steps, its pairs
# with the one-device reference at 6.4x a leaf's own band under a share of
# 1e-2, 3.4x under 1e-1; data_parallel and accumulation over 1000 steps of
# digits at 9.33x under 1e-1 (a 10-wide bias at the floor, step 925), too
# thin a margin, so 3e-1. The floor stays under 1e-3 of the update (3e-1 of
# judged bands under `UNJUDGEABLE`), so a 1% mistake, 1e-2, is over the
# multiple (10x) on every leaf at the floor. Tripling the share can only
# lower a ratio, by 3x at most: the grid's plants, 862x and up under 1e-1,
# stay over 287x.
SIBLING_SHARE = 3e-1


def leaves_of(per_step: list[dict]) -> list[str]:
  """Every leaf named in any step's errors, in the order first seen."""
  return list(dict.fromkeys(leaf for step in per_step for leaf in step))


def bands(per_step: list[dict], band_of, floor: float) -> dict:
  """Each leaf's band over the checked steps, and which leaves are judged.

  Args:
    per_step: the calibration step's errors per checked step, `{leaf:
      ratio}` (`equivalence.update_errors`; a leaf it left bitwise is
      absent, i.e. 0).
    band_of: `band_of` below, the band of one leaf's list of errors.
    floor: the band's floor (`BAND_FLOOR`).

  Returns:
    `{"bands": {leaf: band}, "unjudged": {leaf: band}, "band": the judged
    leaves' largest band, "floor": the band of a leaf no calibration step
    moved, "flips": {leaf: indices left out as rounding flips}}`.
  """
  own, flips = {}, {}
  for leaf in leaves_of(per_step):
    own[leaf], left_out = band_of([step.get(leaf, 0.0) for step in per_step])
    if left_out:
      flips[leaf] = left_out
  unjudged = {leaf: b for leaf, b in own.items() if b >= UNJUDGEABLE}
  judged = {leaf: b for leaf, b in own.items() if leaf not in unjudged}
  band = max([floor, *judged.values()])
  sibling_floor = max(floor, SIBLING_SHARE * band)
  return {"bands": {leaf: max(b, sibling_floor) for leaf, b in judged.items()},
          "unjudged": unjudged, "band": band, "floor": sibling_floor,
          "flips": flips}


def so_far(per_step: list[dict], floor: float) -> dict:
  """`bands` while the run goes on: each leaf's median so far (the final
  band is at least that), for deciding where a step needs a retake."""
  def median(values):
    return float(np.median(values)), []
  return bands(per_step, median, floor) if per_step else {
      "bands": {}, "unjudged": {}, "band": floor, "floor": floor, "flips": {}}


def score(errors: dict | None, judged: dict) -> tuple[float, str]:
  """A step's errors `{leaf: ratio of the update}` in units of each judged
  leaf's own band: the largest, and its leaf ("" where none differs). Leaves
  not judged are skipped; None (no step taken) scores None."""
  if errors is None:
    return None, ""
  worst, where = 0.0, ""
  for leaf, error in errors.items():
    if leaf in judged["unjudged"]:
      continue
    ratio = error / judged["bands"].get(leaf, judged["floor"])
    if ratio > worst or not where:
      worst, where = ratio, leaf
  return worst, where


def band_of(per_step: list) -> tuple[float, list]:
  """The one-step band: the largest calibration error over the checked
  steps, less those (at most `flip_limit`, the largest first) that stand
  `CALIBRATION_FLIP` times over the median of all and reach
  `CALIBRATION_FLIP_LEVEL`; never below `BAND_FLOOR`.

  Returns:
    The band, and the indices of the checked steps left out of it.
  """
  median = max(float(np.median(per_step)) if per_step else 0.0, BAND_FLOOR)
  ranked = [int(i) for i in np.argsort(per_step)[::-1]]
  flips = []
  for i in ranked[:flip_limit(len(per_step))]:
    if (len(flips) + 1 >= len(per_step)
        or per_step[i] <= CALIBRATION_FLIP * median
        or per_step[i] < CALIBRATION_FLIP_LEVEL):
      break
    flips.append(i)
  kept = [v for i, v in enumerate(per_step) if i not in flips]
  return max([BAND_FLOOR, *kept]), sorted(flips)


def flip_limit(checked_steps: int) -> int:
  """How many checked steps a pair of two programs may part at by a
  rounding flip: one, or 5% of the checked steps (`FLIP_SHARE`)."""
  return max(1, int(FLIP_SHARE * checked_steps))


# A step where a pair parts over the band, but a retake of each side on its
# batch nudged by a few ulps (`compare._src.prove.lockstep.NUDGE_ULPS`) brings
# them within it, is a rounding flip seen to fall back (a mistake stays in
# every retake): such steps are excused up to this share of the checked
# steps, `flip_limit` bounding the rest, and past it no run takes more
# retakes. Measured: Lion on tests/sign_like_ports.py ("own_outputs", 50
# steps): pmap and the one-device reference parted by ReLU flips at steps 21
# and 35 beside the first step's sign flips, one over `flip_limit`'s 2.
NUDGED_SHARE = 0.25


def nudged_limit(checked_steps: int) -> int:
  """How many checked steps a pair may part at where nudged retakes fall
  back within the band (`NUDGED_SHARE`), and retakes a run may take."""
  return max(flip_limit(checked_steps), int(NUDGED_SHARE * checked_steps))
