"""Rounding flips of sign-like updates and of ReLUs, at their edges, no run.

A sign-like update (Lion's) moves a few elements by their whole update the
other way between two programs that sum in other orders
(`equivalence.SIGN_FLIP_SHARE`); a ReLU flip between them falls back under
a nudged retake (`leaf_bands.NUDGED_SHARE`). Issue 57: Lion on
tests/sign_like_ports.py at 50 steps failed a correct port by both.
"""

import numpy as np
import pytest

from compare._src.prove import equivalence
from compare._src.prove import flips
from compare._src.prove import leaf_bands

LR = 1e-4
LEAF = "['params']['w'] (1000,)"


def _lion_step(size=1000, flipped=(), scale=1.0, seed=0):
  """A start, and a Lion-like step from it (every element moved by +-LR)
  with the elements `flipped` moved the other way and the rest by `scale`
  times their update."""
  rng = np.random.default_rng(seed)
  # Small, so that start + update rounds far under 1% of the update.
  start = (1e-3 * rng.normal(size=size)).astype(np.float32)
  update = (LR * rng.choice([-1.0, 1.0], size=size)).astype(np.float32)
  other = update * np.float32(scale)
  other[list(flipped)] *= -1
  return ({"params": {"w": start}}, {"params": {"w": start + other}},
          {"params": {"w": start + update}})


def test_a_few_elements_updated_the_other_way_are_left_out_and_counted():
  start, port, truth = _lion_step(flipped=[7])
  counted = {}
  # The leaf's bits differ: it is named, with nothing left to judge.
  assert equivalence.update_errors(port, truth, start, counted) == {LEAF: 0.0}
  assert counted == {LEAF: 1}
  # Without the rule the one element is twice the update off.
  start, port, truth = _lion_step(size=10, flipped=[7])
  assert equivalence.update_errors(port, truth, start)[
      "['params']['w'] (10,)"] == pytest.approx(2.0, rel=1e-3)


@pytest.mark.parametrize("size, flipped, left_out", [
    (1000, 1, True),   # the share: 1 in 1000
    (1000, 2, False),  # over it
    (10000, 10, True),  # a larger leaf: more, by the share
    (10000, 11, False),
    (100, 1, True),    # one element in a leaf of SIGN_FLIP_ONE_IN
    (99, 1, False),    # a smaller leaf: none
    (10, 1, False)])   # a 10-wide bias
def test_how_many_elements_may_be_left_out(size, flipped, left_out):
  start, port, truth = _lion_step(size=size, flipped=range(flipped))
  counted = {}
  errors = equivalence.update_errors(port, truth, start, counted)
  error = errors[f"['params']['w'] ({size},)"]
  assert bool(counted) == left_out and (error == 0.0) == left_out, errors


def test_a_mistake_that_keeps_every_direction_is_judged_in_full():
  # A 1% update moves no element the other way: nothing is left out, and
  # beside one sign flip the 1% still shows on the rest.
  for flipped in ((), (3,)):
    start, port, truth = _lion_step(flipped=flipped, scale=1.01)
    counted = {}
    errors = equivalence.update_errors(port, truth, start, counted)
    assert errors[LEAF] == pytest.approx(0.01, rel=1e-2)
    assert counted == ({LEAF: 1} if flipped else {})


def _checks(over_steps, fell_back, checked=50, port_took_pmaps=True):
  """The lockstep report of a pmap~reference and port~reference pair over
  the band at `over_steps` (indices), pmap's nudged retakes falling back
  within the band at `fell_back`, the port bitwise pmap's step."""
  ratios = [100.0 if i in over_steps else 0.5 for i in range(checked)]
  nudged = [0.4 if i in fell_back else (50.0 if i in over_steps else None)
            for i in range(checked)]
  took = [0.0 if port_took_pmaps else 100.0] * checked
  return {"checked_steps": checked, "steps": list(range(1, checked + 1)),
          "multiple": 10.0, "truth": "reference", "witness": "pmap",
          "port_runs": ["port"], "witness_ratios": {"port": took},
          "nudged_ratios": {"port": [None] * checked, "pmap": nudged},
          "flip_limit": leaf_bands.flip_limit(checked),
          "nudged_limit": leaf_bands.nudged_limit(checked),
          "pairs": {"pmap~reference": {"ratios": ratios},
                    "port~reference": {"ratios": ratios}}}


def test_flips_that_fall_back_under_a_nudge_are_excused_past_the_limit():
  # Lion at 50 steps: a sign flip at step 1 (held), ReLU flips at 21, 35.
  checks = _checks({0, 20, 34}, fell_back={20, 34})
  for pair in ("pmap", "reference"), ("port", "reference"):
    over, excused = flips.over_and_excused(checks, *pair)
    assert list(over) == [0, 20, 34] and excused == [0, 20, 34], pair


def test_flips_that_hold_under_a_nudge_count_against_the_limit():
  # The same steps, none falling back: three over flip_limit's 2.
  checks = _checks({0, 20, 34}, fell_back=set())
  assert flips.over_and_excused(checks, "pmap", "reference")[1] == []
  # Two held, within it.
  checks = _checks({0, 20}, fell_back=set())
  assert flips.over_and_excused(checks, "pmap", "reference")[1] == [0, 20]


def test_falling_back_is_excused_up_to_a_quarter_of_the_steps():
  limit = leaf_bands.nudged_limit(50)
  assert limit == 12
  checks = _checks(set(range(limit)), fell_back=set(range(limit)))
  assert len(flips.over_and_excused(checks, "pmap", "reference")[1]) == limit
  checks = _checks(set(range(limit + 1)), fell_back=set(range(limit + 1)))
  assert flips.over_and_excused(checks, "pmap", "reference")[1] == []


def test_a_port_that_left_pmaps_step_is_not_excused_by_pmaps_fall_back():
  # The port's step is not pmap's (a plant): pmap falling back says
  # nothing of it, and the port has no retake that did.
  checks = _checks({0, 20, 34}, fell_back={20, 34}, port_took_pmaps=False)
  assert flips.over_and_excused(checks, "port", "reference")[1] == []
  fell = flips.fell_back(checks, 10.0)
  assert fell("reference") == [True] * 50
  assert not any(fell("port")) and fell("pmap")[20]


def test_elements_neither_program_moved_are_no_flips():
  # Rows no batch touched (an embedding's) stay put in both programs: not
  # counted, so a flip beside them is still left out; nor is an element
  # only one program moved (a plant freezing it is judged in full).
  start, port, truth = _lion_step(flipped=[7])
  for tree in (port, truth):
    tree["params"]["w"][500:] = start["params"]["w"][500:]
  counted = {}
  assert equivalence.update_errors(port, truth, start, counted) == {LEAF: 0.0}
  assert counted == {LEAF: 1}
  port["params"]["w"][3] = start["params"]["w"][3]
  counted = {}
  assert equivalence.update_errors(port, truth, start, counted)[
      LEAF] == pytest.approx(1.0, rel=1e-3)
  assert counted == {LEAF: 1}


def test_a_retake_or_a_witness_exactly_at_the_multiple_is_within_it():
  # Inclusive at the multiple, as every ratio the verdict judges.
  checks = _checks({0, 20, 34}, fell_back=set())
  checks["nudged_ratios"]["pmap"][20] = checks["nudged_ratios"]["pmap"][
      34] = 10.0
  assert flips.over_and_excused(checks, "pmap", "reference")[1] == [0, 20, 34]
  checks["witness_ratios"]["port"] = [10.0] * 50
  assert flips.over_and_excused(checks, "port", "reference")[1] == [0, 20, 34]
  checks["witness_ratios"]["port"] = [10.0 + 1e-9] * 50
  assert flips.over_and_excused(checks, "port", "reference")[1] == []


def test_a_report_without_a_nudged_limit_holds_every_flip():
  # A report written before the rule (no `nudged_limit`): the flip limit
  # alone, as then.
  checks = _checks({0, 20, 34}, fell_back={20, 34})
  del checks["nudged_limit"]
  assert flips.over_and_excused(checks, "pmap", "reference")[1] == []
  checks = _checks({0, 20}, fell_back={20})
  del checks["nudged_limit"]
  assert flips.over_and_excused(checks, "pmap", "reference")[1] == [0, 20]


def test_an_element_only_one_program_moved_is_no_flip_either_way():
  # The truth's element stayed put while the port's moved down (or up):
  # not opposite ways, judged in full.
  for direction in (-1.0, 1.0):
    start, port, truth = _lion_step(flipped=[7])
    truth["params"]["w"][3] = start["params"]["w"][3]
    port["params"]["w"][3] = start["params"]["w"][3] + np.float32(
        direction * LR)
    counted = {}
    assert equivalence.update_errors(port, truth, start, counted)[
        LEAF] == pytest.approx(1.0, rel=1e-3)
    assert counted == {LEAF: 1}


def test_updates_far_under_a_float32_square_root_of_the_smallest_still_flip():
  # Updates of 1e-24: their product underflows float32, not the sign.
  start = np.zeros(1000, np.float32)
  update = np.full(1000, 1e-24, np.float32)
  port, truth = start + update, start + update
  port[7] = -update[7]
  counted = {}
  errors = equivalence.update_errors({"params": {"w": port}},
                                     {"params": {"w": truth}},
                                     {"params": {"w": start}}, counted)
  assert errors == {LEAF: 0.0} and counted == {LEAF: 1}
