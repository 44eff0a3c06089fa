"""The matmul precision a proof runs at (`compare._src.prove.matmul_precision`).

On an accelerator jax's default precision rounds a float32 matmul's inputs
to tf32 or bfloat16, which the one-ulp band cannot measure (measured on an
H100: correct ports failed at 18.9x-34.1x their band, and passed at 1.74x or
less at "highest"). These tests pin the rule on CPU: what each platform
gets, that the context really reaches the compiled matmul, and that a
proof's every compile runs inside it.
"""

import types

import jax
import jax.numpy as jnp
import pytest

from compare._src.prove import matmul_precision
from compare._src.prove import proof
from compare._src.prove import report as report_module
from compare._src.prove import outcome


def _dot_hlo() -> str:
  x = jnp.ones((4, 4), jnp.float32)
  return jax.jit(jnp.dot).lower(x, x).as_text()


def test_cpu_is_left_as_it_is():
  context, fields = matmul_precision.for_proof("cpu")
  with context:
    assert jax.config.jax_default_matmul_precision is None
  assert fields == {"matmul_precision": None, "matmul_precision_note": None}


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_an_accelerator_proves_at_highest_and_says_so(platform):
  context, fields = matmul_precision.for_proof(platform)
  # Negative control: outside the context the matmul carries no precision.
  assert "HIGHEST" not in _dot_hlo()
  with context:
    assert "HIGHEST" in _dot_hlo()
  assert jax.config.jax_default_matmul_precision is None  # restored
  assert fields["matmul_precision"] == "highest"
  assert platform in fields["matmul_precision_note"]


def test_a_teams_own_precision_is_kept_and_a_coarse_one_is_named():
  with jax.default_matmul_precision("bfloat16"):
    context, fields = matmul_precision.for_proof("gpu")
    with context:
      assert jax.config.jax_default_matmul_precision == "bfloat16"
  assert fields["matmul_precision"] == "bfloat16"
  assert "correct port may fail" in fields["matmul_precision_note"]
  with jax.default_matmul_precision("float32"):
    _, fields = matmul_precision.for_proof("gpu")
  assert fields == {"matmul_precision": "float32",
                    "matmul_precision_note": None}


def test_every_compile_of_a_proof_runs_inside_the_context(monkeypatch):
  seen = []

  def fake_compare(*args, **kwargs):
    seen.append(jax.config.jax_default_matmul_precision)
    return {"verdict": "pass", "runs": {}}

  monkeypatch.setattr(matmul_precision, "for_proof",
                      lambda platform: (jax.default_matmul_precision(
                          "highest"), {"matmul_precision": "highest",
                                       "matmul_precision_note": "NOTE"}))
  monkeypatch.setattr(outcome, "compare", fake_compare)
  monkeypatch.setattr(report_module, "throughput_ratio", lambda full: None)
  plan = types.SimpleNamespace(name="toy", control=None)
  config = types.SimpleNamespace(workload="w", dataset="d", steps=2,
                                 global_batch=8, learning_rate=0.1, seed=0)
  result = proof.prove_plan(plan, config, 8)
  assert seen == ["highest"]
  assert result["matmul_precision_note"] == "NOTE"
  assert jax.config.jax_default_matmul_precision is None
