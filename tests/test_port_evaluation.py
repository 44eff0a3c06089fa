"""A `Port`'s evaluation per side, through the public API only.

pmap's side evaluates with `evaluate`, the port's with `port_evaluate`
where the team ported its evaluation too; the end-of-run check evaluates
one shared state on each side, so a mistake in the port's evaluation fails
the proof even where every train step is bitwise. Without `port_evaluate`
one function serves both sides, and the `evaluation-1pct` control is the
mistake planted in the port's side to show the check can fail.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import compare
from compare import testing
from tests import toy_ports

STEPS = 4
_X, _Y = toy_ports._data()  # pylint: disable=protected-access


def _mse(params):
  prediction = _X[:512] @ np.asarray(params["w"]) + np.asarray(params["b"])
  return float(np.mean((prediction - _Y[:512]) ** 2))


def evaluate(state):
  return {"mse": _mse(state.params), "w0": float(state.params["w"][0])}


def port_evaluate(state):
  """The port's own evaluation: the same numbers, computed with jnp."""
  w, b = jnp.asarray(state.params["w"]), jnp.asarray(state.params["b"])
  prediction = jnp.asarray(_X[:512]) @ w + b
  return {"mse": float(jnp.mean((prediction - _Y[:512]) ** 2)),
          "w0": float(w[0])}


def _off_from_the_step(step: int, metric: str):
  """`port_evaluate`, `metric` 1% high once the state has taken `step`
  optimiser steps (a plant that acts late: the first-step checks see no
  evaluation, and the one at the end sees the final state)."""
  def wrong(state):
    metrics = port_evaluate(state)
    if int(state.step) >= step:
      metrics[metric] *= 1.01
    return metrics
  return wrong


def test_a_right_port_evaluation_passes_on_its_own_side():
  proof = testing.assert_port_equivalent(
      toy_ports.port(steps=STEPS, evaluate=evaluate,
                     port_evaluate=port_evaluate))
  shared = next(v for v in proof.report["equivalence"]
                if v["at"] == "final" and (v["a"], v["b"]) == ("port", "pmap"))
  assert set(shared["shared_eval"]["metrics"]) == {"mse", "w0"}
  assert all(m["within"] for m in shared["shared_eval"]["metrics"].values())


@pytest.mark.parametrize("metric", ["mse", "w0"])
def test_a_mistake_in_the_port_evaluation_fails_the_proof(metric):
  wrong = toy_ports.port(steps=STEPS, evaluate=evaluate,
                         port_evaluate=_off_from_the_step(STEPS, metric))
  proof = compare.prove(wrong, windows=0)
  assert proof.verdict == "fail"
  assert "port and pmap" in proof.first_failure
  assert metric in proof.first_failure
  # The train steps themselves are right: only the end's check fails.
  lockstep = [v for v in proof.report["equivalence"] if v["at"] == "lockstep"]
  assert lockstep and all(v["verdict"] != "differ" for v in lockstep)


def test_the_evaluation_control_fails_a_port_with_one_evaluation():
  port = toy_ports.port(steps=STEPS, evaluate=evaluate)
  testing.assert_port_equivalent(port)
  with pytest.raises(AssertionError, match="port and pmap"):
    testing.assert_port_equivalent(port, control="evaluation-1pct")


def test_the_evaluation_control_is_offered_only_with_an_evaluation():
  with pytest.raises(Exception, match="evaluation-1pct"):
    compare.prove(toy_ports.port(steps=STEPS), windows=0,
                  control="evaluation-1pct")


@pytest.mark.parametrize("changes,message", [
    ({"port_evaluate": port_evaluate}, "port_evaluate: give evaluate too"),
    ({"evaluate": evaluate, "port_evaluate": lambda s: {"mse": 0.0}},
     r"port_evaluate returns \['mse'\] where evaluate returns"),
    ({"evaluate": evaluate, "port_evaluate": "no"},
     "port_evaluate is not callable"),
])
def test_a_wrong_port_evaluation_is_one_line(changes, message):
  with pytest.raises(compare.PortError, match=message):
    compare.prove(toy_ports.port(steps=STEPS, **changes), windows=0)
