"""How close two runs must be, and why: the `Tolerance` each strategy states.

Every tolerance is `(rtol, atol)` where atol is scaled per tensor: a leaf
passes when `|a - b| <= atol * max|b_leaf| + rtol * |b|`. Scaling by the
leaf's own magnitude keeps one number meaningful for weights (~0.1), momentum
traces (~gradients) and step counters alike, and stops near-zero entries
(whose relative error is large and meaningless) from deciding the verdict.
The numbers and their measured reasons live with each strategy
(`shardport.strategies`, its `tolerances`).
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Tolerance:
  """`rtol` relative to each element, `atol` relative to the leaf's max.

  Attributes:
    rtol: allowed difference relative to each element of the reference side.
    atol: allowed difference relative to the largest |element| of the leaf.
    reason: what was measured to choose the numbers.
  """

  rtol: float
  atol: float
  reason: str = ""

