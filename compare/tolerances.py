"""How close two runs must be for `close`: one entry per strategy.

Every entry is `(rtol, atol)` where atol is scaled per tensor: a leaf passes
when `|a - b| <= atol * max|b_leaf| + rtol * |b|`. Scaling by the leaf's own
magnitude keeps one number meaningful for weights (~0.1), momentum traces
(~gradients) and step counters alike, and stops near-zero entries (whose
relative error is large and meaningless) from deciding the verdict.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tolerance:
  """`rtol` relative to each element, `atol` relative to the leaf's max."""

  rtol: float
  atol: float


TOLERANCES = {
    "data_parallel": {
        # After one step the runs differ only in summation order: 8 sums of
        # 32 then a mean, against one sum of 256. float32 rounding of such
        # sums is ~1e-7 of the summed magnitude; measured max error after one
        # step is ~4e-7 of max|leaf|. 1e-5 leaves 25x headroom and is still
        # 100x tighter than the error of one changed example or of a 1%
        # learning-rate change (tests/test_data_parallel.py checks both).
        "first_step": Tolerance(rtol=1e-5, atol=1e-5),
        # Over many steps rounding differences grow chaotically through the
        # ReLUs (JAX-FACTS: 1.9e-5 after 10 steps); measured drift after 20
        # steps stays below 1e-5 of max|leaf|, so 1e-3 is generous yet far
        # below the gradient-trap error (8x gradients: ~1e-1).
        "final": Tolerance(rtol=1e-3, atol=1e-3),
    },
}


def get(strategy: str, at: str) -> Tolerance:
  """The tolerance for `strategy` at `at` ("first_step" or "final")."""
  return TOLERANCES[strategy][at]
