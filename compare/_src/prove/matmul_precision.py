"""The matmul precision a proof runs at.

The one-step band is measured by nudging each batch by a few float32 ulps
(`compare._src.prove.lockstep.NUDGE_ULPS`) and seeing how far rounding alone
moves the step. That holds only where matmuls compute in float32. On a GPU
(tf32 inputs, 10-bit mantissas) and a TPU (bfloat16 passes), jax's default
precision rounds each matmul's inputs far coarser than an ulp: most nudges
vanish before they reach a product, the band comes out too narrow, and two
correct programs whose compilers chose different kernels differ by more
than it. Measured on one H100 (docs/jax-facts.md, Equivalence): at the
default precision correct ports failed at 18.9x-34.1x their band; with
`jax_default_matmul_precision="highest"` they passed at 2.3x or less.
So a proof on an accelerator runs its
matmuls at "highest" unless the team chose a precision themselves; XLA:CPU
computes float32 matmuls in float32 already, and is left as it is.
"""

import contextlib

PROOF_PRECISION = "highest"
# Precisions at which float32 matmuls keep float32 inputs.
FLOAT32_PRECISIONS = ("highest", "float32")


def chosen() -> str | None:
  """The team's own `jax_default_matmul_precision`, or None (jax's
  default for the backend)."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.config.jax_default_matmul_precision


def for_proof(platform: str) -> tuple[contextlib.AbstractContextManager,
                                      dict]:
  """The context a proof on `platform` runs in, and what the report says.

  Returns:
    `(context, fields)`: the context to enter around every compile and
    step, and the report's `matmul_precision` and `matmul_precision_note`
    (None on CPU at the default, where nothing changes).
  """
  import jax  # pylint: disable=g-import-not-at-top
  own = chosen()
  if platform == "cpu":
    return contextlib.nullcontext(), {"matmul_precision": own,
                                      "matmul_precision_note": None}
  if own is None:
    return (jax.default_matmul_precision(PROOF_PRECISION),
            {"matmul_precision": PROOF_PRECISION,
             "matmul_precision_note": (
                 f"matmuls at precision {PROOF_PRECISION!r} for the proof "
                 f"(on {platform}, jax's default rounds their inputs below "
                 "float32, which the one-ulp band cannot measure; the "
                 "speeds are at this precision too)")})
  note = None
  if own not in FLOAT32_PRECISIONS:
    note = (f"matmuls at the precision you chose, {own!r}: below float32 "
            "the one-ulp band is too narrow, so a correct port may fail; "
            f"prove at {PROOF_PRECISION!r}")
  return contextlib.nullcontext(), {"matmul_precision": own,
                                    "matmul_precision_note": note}
