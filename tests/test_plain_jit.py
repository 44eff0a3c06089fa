"""The guide's plain-`jit` port of a Linen TrainState step, proved on pmap's.

docs/plain_jit.py holds a flax Linen model with BatchNorm and dropout under
`optax.MultiSteps`, its pmap original and its plain-`jit` port (the region
docs/MIGRATION.md#plain-jit quotes). `compare.prove` must pass the port
against pmap, and fail a port whose BatchNorm normalises each device's
shard alone at step 1. Four steps, untimed (`windows=0`): CI's time budget.
"""

import compare
from docs import plain_jit


def test_the_plain_jit_port_proves_against_pmap():
  proof = compare.prove(plain_jit.port(), windows=0)
  assert proof.verdict == "pass", proof.first_failure
  assert set(proof.report["runs"]) == {"pmap", "port"}


def test_batch_norm_statistics_per_shard_fail_at_step_1():
  # The mistake dropping axis_name guards against in a shard_map port: each
  # shard normalised by its own statistics. The proof names the step.
  proof = compare.prove(
      plain_jit.port(plain_jit.per_shard_statistics_step), windows=0)
  assert proof.verdict == "fail" and proof.exit_code == 1
  assert proof.first_failure.startswith("first at step 1: port vs pmap"), (
      proof.first_failure)
