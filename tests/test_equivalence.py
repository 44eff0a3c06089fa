"""The equivalence check, the HLO reader and the tolerance table."""

import numpy as np
import pytest

from compare._src.prove import equivalence
from compare._src.measure import hlo
from shardport import strategies
from shardport.strategies import tolerances

TOL = tolerances.Tolerance(rtol=1e-5, atol=1e-5)


def test_ulp_distance_counts_representable_steps():
  one = np.float32(1.0)
  assert equivalence.ulp_distance(np.array([one]), np.array([one]))[0] == 0
  next_up = np.nextafter(one, np.float32(2))
  assert equivalence.ulp_distance(np.array([one]), np.array([next_up]))[0] == 1
  # Across zero: -0.0 and +0.0 are the same distance from the smallest float.
  tiny = np.array([np.float32(1e-45)])
  assert equivalence.ulp_distance(-tiny, tiny)[0] == 2


def test_verdicts_and_their_negative_controls():
  tree = {"w": np.linspace(-1, 1, 50, dtype=np.float32), "step": np.int32(3)}
  assert equivalence.compare_trees(tree, tree, TOL)["verdict"] == "bitwise"
  nudged = {**tree, "w": tree["w"] * np.float32(1 + 1e-6)}
  assert equivalence.compare_trees(nudged, tree, TOL)["verdict"] == "close"
  moved = {**tree, "w": tree["w"] + np.float32(1e-3)}
  result = equivalence.compare_trees(moved, tree, TOL)
  assert result["verdict"] == "differ"
  assert result["worst"] == "['w']"
  stepped = {**tree, "step": np.int32(4)}
  assert equivalence.compare_trees(stepped, tree, TOL)["verdict"] == "differ"


def test_atol_scales_with_each_leaf():
  small = {"a": np.full(4, 1e-6, np.float32), "b": np.ones(4, np.float32)}
  # Leaf a allows 1e-5 * 1e-6 (atol of its max) + 1e-5 * 1e-6 (rtol) =
  # 2e-11, and 1e-10 is 5x that (no rounding decides it); leaf b allows
  # 2e-5, so an offset 10^4 times larger (1e-6) is still close there.
  off_a = {"a": small["a"] + np.float32(1e-10), "b": small["b"]}
  assert equivalence.compare_trees(off_a, small, TOL)["verdict"] == "differ"
  assert equivalence.compare_trees(off_a, small, TOL)["worst"] == "['a']"
  off_b = {"a": small["a"], "b": small["b"] + np.float32(1e-6)}
  assert equivalence.compare_trees(off_b, small, TOL)["verdict"] == "close"
  # And a quarter of leaf a's allowance is within it.
  within = {"a": small["a"] + np.float32(5e-12), "b": small["b"]}
  assert equivalence.compare_trees(within, small, TOL)["verdict"] == "close"


def test_shape_mismatch_is_an_error():
  with pytest.raises(ValueError, match="shapes differ"):
    equivalence.compare_trees({"a": np.zeros(2)}, {"a": np.zeros(3)}, TOL)


def test_every_strategy_has_both_tolerances():
  for strategy, spec in strategies.STRATEGIES.items():
    entries = spec.tolerances
    assert set(entries) == {"first_step", "final"}, strategy
    assert all(entry.reason for entry in entries.values()), strategy
    assert entries["first_step"].atol <= entries["final"].atol


def test_collective_counts_read_instructions_not_names():
  text = """
  %all-reduce.1 = f32[] all-reduce(f32[] %x), replica_groups={}
  %ars = (f32[], f32[]) all-reduce-start(f32[] %y, f32[] %z)
  %ag = f32[8] all-gather(f32[1] %w), dimensions={0}
  %fusion.all-gather = f32[] fusion(f32[] %v)
  """
  counts = hlo.count_collectives(text)
  assert counts["all-reduce"] == 2
  assert counts["all-gather"] == 1
  assert counts["reduce-scatter"] == 0
