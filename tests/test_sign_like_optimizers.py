"""Optimisers whose first update is sign-like (AdamW, Adafactor, Lion) with a
one-device `reference_step` (issue 57): the first step is judged by
lockstep's rounding-flip rule, so a correct port passes where pmap and the
reference part at step 1 by a flip, and a 1% mistake still fails at its
step. The program is tests/sign_like_ports.py; the rule on made-up checks
comes first.
"""

import numpy as np
import pytest

import compare
from compare._src.prove import equivalence
from compare._src.prove import leaf_bands
from compare._src.prove import lockstep
from compare._src.prove import port_runs
from compare._src.prove import verdicts
from tests import sign_like_ports

LEAF = "['params']['w'] (4,)"
INITIAL = {"params": {"w": np.zeros(4, np.float32)}}
# The truth's first update, and a band of 1e-5 of it (a calibration flip at
# step 1 left out, `lockstep.band_of`).
TRUTH = {"params": {"w": np.full(4, 1e-3, np.float32)}}
CALIBRATION = [{LEAF: 8e-3}, {LEAF: 1e-5}, {LEAF: 1e-5}, {LEAF: 1e-5}]


class _Strategy:
  tolerances = {"first_step": port_runs.FIRST_STEP}


def _moved(share):
  """The truth's first step with one element moved by `share` of the
  update: a rounding flip, or a planted mistake."""
  w = TRUTH["params"]["w"].copy()
  w[0] += share * 1e-3
  return {"params": {"w": w}}


def _first_steps(firsts, apart=(), later=(1.0, 1.0, 1.0)):
  """`first_step`'s verdict of every pair of `firsts` (pmap, port and the
  reference, the truth), with the lockstep report those first steps make
  at step 1 of 4 (`later`: every pair's ratio at steps 2 to 4)."""
  judged = leaf_bands.bands(CALIBRATION, lockstep.band_of,
                            lockstep.BAND_FLOOR)
  pairs = [("port", "pmap"), ("pmap", "reference"), ("port", "reference")]

  def ratios(a, b):  # step 1 as the first steps make it, then `later`
    return [leaf_bands.score(equivalence.update_errors(
        firsts[a], firsts[b], INITIAL), judged)[0], *later]

  witness = leaf_bands.score(equivalence.update_errors(
      firsts["port"], firsts["pmap"], INITIAL), judged)[0]
  checks = {
      "multiple": 10.0, "checked_steps": 4, "steps": [1, 2, 3, 4],
      "port_runs": ["port"], "witness": "pmap",
      "witness_ratios": {"port": [witness, 0.0, 0.0, 0.0]},
      "flip_limit": lockstep.flip_limit(4), "initial": INITIAL,
      "judged": judged, "apart": {run: [1] if run in apart else []
                                  for run in firsts},
      "pairs": {f"{a}~{b}": {"ratios": ratios(a, b)} for a, b in pairs}}
  return {f"{v['a']}~{v['b']}": v for v in verdicts.first_step(
      _Strategy(), pairs, firsts, checks)}


def test_a_first_step_flip_is_excused_as_lockstep_excuses_step_one():
  # pmap (and the port, taking its step) part from the reference at step 1
  # by a flip: one element moved by twice the update, far over the band.
  flipped = _moved(2.0)
  results = _first_steps({"pmap": flipped, "port": flipped,
                          "reference": TRUTH})
  for name in ("pmap~reference", "port~reference"):
    assert results[name]["band_ratio"] > 10
    assert results[name]["verdict"] == "close", results[name]
    assert results[name]["flip_steps"] == [1]
  assert verdicts.first_failure(list(results.values())) is None


@pytest.mark.parametrize("share", [1e-2, 2.0])
def test_a_port_off_pmaps_first_step_is_never_excused(share):
  # The port's first update 1% off (or a flip of its own, which pmap did
  # not take): no witness, so the excuse does not reach it.
  results = _first_steps({"pmap": _moved(2.0), "port": _moved(2.0 + share),
                          "reference": TRUTH})
  assert results["port~pmap"]["verdict"] == "differ"
  assert results["port~reference"]["verdict"] == "differ"
  assert results["port~reference"]["flip_steps"] == []
  assert verdicts.first_failure(list(results.values())).startswith(
      "first at step 1: port vs pmap")


def test_a_first_step_flip_counts_among_the_pairs_flips():
  # Over the band at step 3 too: two flips in 4 checked steps are more
  # than a rounding flip explains (`lockstep.flip_limit`), so neither is
  # excused, the first step no more than lockstep's step 3.
  flipped = _moved(2.0)
  results = _first_steps({"pmap": flipped, "port": flipped,
                          "reference": TRUTH}, later=(1.0, 50.0, 1.0))
  assert results["pmap~reference"]["verdict"] == "differ"
  assert results["pmap~reference"]["flip_steps"] == []


def test_a_run_that_starts_apart_is_not_excused():
  # Its first step is not lockstep's step 1 (an initial state planted
  # wrong): what lockstep excused there says nothing of it.
  flipped = _moved(2.0)
  results = _first_steps({"pmap": flipped, "port": flipped,
                          "reference": TRUTH}, apart=("port",))
  assert results["port~reference"]["verdict"] == "differ"
  assert results["pmap~reference"]["verdict"] == "close"


def _first_steps_apart(proof):
  return [v for v in proof.report["equivalence"]
          if v["at"] == "first_step" and v["verdict"] != "bitwise"]


@pytest.mark.parametrize("steps", [4, 10])
def test_the_issues_adamw_port_passes(steps):
  # The issue's false failure: the calibration flipped at step 1 (left out
  # of the band), and pmap parts from the reference there by 82.5x the band
  # on jax 0.10.2's CPU; the port is pmap's step to the bit.
  proof = compare.prove(sign_like_ports.port("adamw", steps=steps),
                        windows=0)
  assert proof.verdict == "pass", proof.table()
  assert proof.report["lockstep"]["band_flip_steps"] == [1]
  apart = _first_steps_apart(proof)
  assert {(v["a"], v["b"]) for v in apart} == {("pmap", "reference"),
                                               ("port", "reference")}
  assert all(v["band_ratio"] > 10 and v["flip_steps"] == [1] for v in apart)
  # The printed detail wraps at 100 columns: its words, not its lines.
  assert "a rounding flip (excused" in " ".join(proof.table().split())


# Measured, not run here (CI's time): `python -m tests.sign_like_ports`
# (2026-12-04, after 5d2542b, jax 0.10.2, 8 emulated CPU devices) proves
# all three optimisers under both losses at 4, 10 and 50 steps: all 18
# pass, the calibration flipping at step 1 under AdamW (both losses) and
# under "own_outputs" (all three). Lion under "own_outputs" at 50 steps,
# run here, failed at step 1 until sign flips were left out of a leaf's
# error and flips that fall back under nudged retakes were excused past
# `flip_limit` (issue 57): pmap and the one-device reference part by single
# sign flips at steps 21, 25, 30, 35 and 45 and by ReLU flips at 21 and
# 35, the calibration by sign flips at 25 and 30.
@pytest.mark.parametrize("optimizer, steps", [
    ("adafactor", 4), ("adafactor", 10), ("lion", 4), ("lion", 50)])
def test_adafactor_and_lion_pass_through_their_first_step_flip(optimizer,
                                                               steps):
  # Their exact signs flip rarely under "labels": targets the initial
  # model's own outputs make the gradient at step 1 rounding alone there,
  # so each flips whole updates at step 1.
  proof = compare.prove(sign_like_ports.port(optimizer, steps=steps,
                                             loss="own_outputs"), windows=0)
  assert proof.verdict == "pass", proof.table()
  apart = [v for v in _first_steps_apart(proof) if v["b"] == "reference"]
  assert apart and all(v["band_ratio"] > 10 and v["flip_steps"] == [1]
                       for v in apart), apart
  if steps == 50:
    # Which later steps flip is the CPU's rounding: where this was first
    # measured, pmap and the reference parted by sign flips at steps 21, 25,
    # 30, 35 and 45 as well (over `flip_limit`, left out as flips); on the
    # 2-core CI machine of 2026-12-07 at step 1 only, the same on the code
    # of 19577bd. Either way the port stays bitwise pmap, each pair with the
    # reference parts only by flips, and flips over the limit are shown.
    checks = proof.report["lockstep"]
    lockstep = [v for v in proof.report["equivalence"]
                if v["at"] == "lockstep" and v["b"] == "reference"]
    assert lockstep and all(v["verdict"] == "close" and v["flip_steps"]
                            for v in lockstep), lockstep
    assert [v["verdict"] for v in proof.report["equivalence"]
            if v["at"] == "lockstep" and v["b"] == "pmap"] == ["bitwise"]
    if any(len(v["flip_steps"]) > checks["flip_limit"] for v in lockstep):
      assert checks["pairs"]["pmap~reference"]["sign_flips"]
      assert "sign flips left out" in proof.table()


@pytest.mark.parametrize("optimizer, loss, control, step", [
    # At the flip's own step, under the largest flip (Lion's whole update).
    ("lion", "own_outputs", "update-1pct-at:1", 1),
    # At a step where pmap and the reference part by a ReLU flip and a
    # sign flip that the correct port's proof excuses (35 of 50).
    ("lion", "own_outputs", "update-1pct-at:35", 35),
    ("adamw", "labels", "update-1pct-at:3", 3)])
def test_a_one_percent_plant_fails_at_its_step_beside_the_flip(
    optimizer, loss, control, step):
  proof = compare.prove(sign_like_ports.port(optimizer, steps=max(4, step),
                                             loss=loss),
                        control=control, windows=0)
  assert proof.first_failure.startswith(f"first at step {step}: port vs "
                                        "pmap"), proof.first_failure
