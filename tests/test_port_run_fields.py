"""What a `Port` gained so that accumulation is a Port, through the public
API only: calls of a step per optimiser step (`calls_per_step`), a view of
a run's state for comparison (`compare.StateView`, `state_views`), the
reference's own initial state (`reference_init`) and programs trained
beside the proof (`compare.Baseline`, `baselines`).

The toy program accumulates under optax.MultiSteps: K calls of pmap's and
the port's steps make one optimiser step, each call the whole batch, so K
equal gradients are averaged (exact for K a power of two) and the runs
land on the one-device reference's plain step.
"""

import dataclasses

import jax
import optax
import pytest
from jax.sharding import PartitionSpec as P

import compare
from tests import toy_ports

K, STEPS = 2, 3


def _wrapped():
  """The toy's initial state, its optimiser wrapped by optax.MultiSteps."""
  state = toy_ports.initial_state()
  tx = optax.MultiSteps(state.tx, every_k_schedule=K).gradient_transformation()
  return state.replace(tx=tx, opt_state=tx.init(state.params))


def _view():
  """MultiSteps' inner state and optimiser-step count, as the reference
  holds them; placed back with the call counter K per step."""
  def placed(shared, like):
    inner = like.opt_state._replace(inner_opt_state=shared.opt_state,
                                    gradient_step=shared.step)
    return like.replace(params=shared.params, opt_state=inner,
                        step=shared.step * K)

  return compare.StateView(
      compared=lambda s: s.replace(opt_state=s.opt_state.inner_opt_state,
                                   step=s.opt_state.gradient_step),
      placed=placed)


def _port(**changes):
  base = toy_ports.port(steps=STEPS)
  mesh_step = jax.jit(jax.shard_map(
      toy_ports._step("data"), mesh=base.mesh,  # pylint: disable=protected-access
      in_specs=(P(), P("data")), out_specs=P(), check_vma=False))
  fields = dict(
      init=_wrapped, reference_init=toy_ports.initial_state,
      port_name="shard", calls_per_step={"pmap": K, "shard": K},
      state_views={"pmap": _view(), "shard": _view()},
      baselines={"plain_shard": compare.Baseline(mesh_step, "port",
                                                 toy_ports.initial_state)},
      pairs=(("pmap", "shard"), ("shard", "reference"),
             ("shard", "plain_shard")))
  return dataclasses.replace(base, **{**fields, **changes})


def test_k_calls_read_through_their_view_land_on_the_plain_step():
  proof = compare.prove(_port(), windows=0)
  report = proof.report
  assert proof.verdict == "pass", proof.first_failure
  assert set(report["runs"]) == {"pmap", "shard", "plain_shard", "reference"}
  # Every run's final state, read through its view, is the reference's
  # kind: the same digest where the two sides agree to the bit.
  digests = {name: run["state_digest"] for name, run in
             report["runs"].items()}
  assert digests["shard"] == digests["plain_shard"], digests
  # The baseline is never a port run: no control would be planted in it.
  assert report["lockstep"]["port_runs"] == ["shard"]


def test_without_its_calls_a_multisteps_run_never_updates_and_fails():
  # One call per optimiser step: MultiSteps only accumulates, the params
  # stay where they started while the reference's move.
  proof = compare.prove(_port(calls_per_step=None), windows=0)
  assert proof.verdict == "fail"
  assert "shard vs reference" in proof.first_failure


def test_a_view_that_places_the_state_wrongly_fails_the_proof():
  # The optimiser-step count left at its start: the lockstep's placed
  # states step from the wrong count at every checked step after the first.
  def wrong_placed(shared, like):
    return like.replace(params=shared.params, opt_state=like.opt_state.
                        _replace(inner_opt_state=shared.opt_state))

  wrong = compare.StateView(_view().compared, wrong_placed)
  proof = compare.prove(_port(state_views={"pmap": _view(), "shard": wrong}),
                        windows=0)
  assert proof.verdict == "fail"
  assert "shard" in proof.first_failure


@pytest.mark.parametrize("changes, field", [
    ({"state_views": None}, "state_views"),
    ({"state_views": {"pmap": _view()}}, "state_views"),
    ({"state_views": {"pmap": "inner"}}, "state_views"),
    ({"calls_per_step": {"nowhere": 2}}, "calls_per_step"),
    ({"calls_per_step": {"pmap": 0}}, "calls_per_step"),
    ({"baselines": {"pmap_plain": compare.Baseline(lambda s, b: (s, 0.0))}},
     "baselines"),
    ({"baselines": {"plain": compare.Baseline(lambda s, b: (s, 0.0),
                                              "mesh")}}, "baselines"),
    ({"reference_init": _wrapped}, "state_views"),
])
def test_each_run_field_refuses_what_it_cannot_be(changes, field):
  with pytest.raises(compare.PortError, match=f"^{field}"):
    compare.prove(_port(**changes), windows=0)


def test_a_baseline_must_return_its_own_state():
  # A pmap-side baseline whose step drops a leaf of its state.
  wrong = compare.Baseline(jax.pmap(toy_ports._drops_bias), "pmap",  # pylint: disable=protected-access
                           toy_ports.initial_state)
  with pytest.raises(compare.PortError,
                     match=r"^baselines\['plain_shard'\]'s state has no"):
    compare.prove(_port(baselines={"plain_shard": wrong}), windows=0)
