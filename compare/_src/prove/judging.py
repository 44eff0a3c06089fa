"""How the verdicts judge, whatever the program: the engine's constants.

Every program is judged by the same multiples (a team's `Port` and each of
our strategies): a pair's step from the shared state against the one-step
band (`LOCKSTEP_MULTIPLE`), a pair not bitwise at the end against the
calibration runs' spread (`CALIBRATION_MULTIPLE`, shown, not judged), and
the end-of-run evaluation of one shared state (`SHARED_EVAL_REASON`). Each
carries its reason, as the appendix quotes it.
"""

# A pair's step from the shared state may differ from its partner's by this
# multiple of the one-step band: the reference's own step taken again with
# its rows reordered, the largest over the checked steps (`compare._src.prove.lockstep`).
LOCKSTEP_MULTIPLE = 10.0
LOCKSTEP_REASON = (
    "one step from the same state differs only in summation order, so the "
    "band does not grow with the step; judged leaf by leaf, each against "
    "its own band (at least 3/10 of the largest leaf's: under 1/10 a "
    "10-wide bias at that floor reached 9.3x at step 925 of 1000 on "
    "digits, 3.1x under 3/10), correct ports stay under 6.7x it in the "
    "verdict grid (both runtimes), while a 1% change of the update, or 0.2% "
    "of the gradient, is over 280x it at its step (500x measured under "
    "3/10; 860x under 1/10, which a wider floor lowers 3x at most; "
    "docs/measured/verdict_grid*.json, quoted in the appendix, A1). "
    "A ReLU input within rounding of zero can flip in a program of other "
    "shapes (109x at step 118 of random data, one-device reference against "
    "the 8-device runs): a pair of two programs may part at one step, or "
    "5% of the checked steps, where every port run took pmap's step; a "
    "calibration step that flips (10x over the steps' median, and 1e-3 of "
    "the update) is left out of the band, at as many steps")
# A pair that is not bitwise at the end: its free-running test loss and
# accuracy against this multiple of the calibration runs' spread (floored at
# 1% of the test loss and 1% accuracy or one test example), shown, not
# judged.
CALIBRATION_MULTIPLE = 3.0
SHARED_EVAL_REASON = (
    "every run evaluates the ground truth's final state, placed in its own "
    "layout: only summation order differs, so a loss agrees to 1e-5 of "
    "itself and an accuracy to one test example (measured bitwise or "
    "2.4e-7 on random data), where device 0's loss x 1.01 is 1e-2 of it; "
    "free-running runs part chaotically (jit's test loss 6.5x the "
    "calibration spread on 2 devices after 100 steps), so their metrics "
    "are shown, not judged")
# Why the calibration multiple is shown, not judged.
CALIBRATION_REASON = (
      "shown, not judged: rounding alone moves the calibration runs' test "
      "metrics, and three of them do not bound where it takes free-running "
      "runs (jit on 2 devices after 100 steps: 6.5x their spread)")
