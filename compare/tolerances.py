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
        # 32 then a mean, against one sum of 256. Measured over seeds 0-3 on
        # 2 and 8 devices: at most 9.3e-7 of max|leaf|. 1e-5 leaves 10x
        # headroom and is 1000x below the error of a 1% learning-rate change
        # (1e-2 of max|leaf|, in the zero-initialised biases); the gradient
        # trap is far beyond (tests/test_data_parallel.py checks both).
        "first_step": Tolerance(rtol=1e-5, atol=1e-5),
        # Rounding differences then grow chaotically through ReLU flips and
        # momentum. Measured after the default 20 steps: at most 9.5e-7 of
        # max|leaf|; after 100 steps up to 6e-2 and after 200 steps 2e-1 (the
        # trajectories have separated, which no tolerance can excuse). 1e-3
        # covers runs of a few dozen steps; longer runs are expected to
        # differ from the reference while the first step still agrees.
        "final": Tolerance(rtol=1e-3, atol=1e-3),
    },
    "ensemble": {
        # Every member runs the single-model program unchanged on every
        # backend (members one after another on a device, not vmapped: see
        # docs/ensemble-notes.md): measured bitwise at the first step and
        # after 55 steps, 8 and 16 members on 8 devices and on 1, 2, 4.
        # 1e-5 as for data_parallel leaves room for another XLA build's
        # rounding and is 1000x below a 1% learning-rate change.
        "first_step": Tolerance(rtol=1e-5, atol=1e-5),
        # lr 0.1 with momentum 0.9 grows a 1-ulp difference to 1e-2..1e-1 of
        # max|leaf| within 5 epochs (measured with vmapped members), so the
        # final check holds only while runs stay (near) bitwise, as they do.
        "final": Tolerance(rtol=1e-3, atol=1e-3),
    },
    "accumulation": {
        # K microbatch gradients averaged against one full-batch gradient:
        # only the summation order differs (JAX-FACTS: no method is
        # bit-exact). Measured at most 7.7e-7 of max|leaf| after one step
        # (K in 1, 2, 4; 1, 2, 8 devices), so 1e-5 as for data_parallel.
        # K=1 against the plain data-parallel step is bitwise by construction
        # (the first microbatch starts the running sum).
        "first_step": Tolerance(rtol=1e-5, atol=1e-5),
        # As data_parallel: rounding grows over steps; 1e-3 held in every
        # measured default run (20 steps) and is far below a 1% change.
        "final": Tolerance(rtol=1e-3, atol=1e-3),
    },
}


def get(strategy: str, at: str) -> Tolerance:
  """The tolerance for `strategy` at `at` ("first_step" or "final")."""
  return TOLERANCES[strategy][at]
