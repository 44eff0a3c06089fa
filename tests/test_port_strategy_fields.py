"""What a `Port` gained so that our strategies are Ports, through the public
API only: its port's run name, the judged pairs, the row-order calibration,
and an evaluation on the devices (`compare.DeviceEvaluation`), each side
evaluating its own state on the test batch, so that a mistake in the port's
evaluation step fails the proof."""

import jax
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import compare
from tests import toy_ports

STEPS = 3
_X, _Y = toy_ports._data()  # pylint: disable=protected-access
TEST = {"x": _X[:512], "y": _Y[:512]}


def _sums(params, batch):
  error = batch["x"] @ params["w"] + params["b"] - batch["y"]
  return {"squared": (error ** 2).sum(), "count": error.shape[0]}


def _mesh_evaluation(scale=1.0):
  mesh = toy_ports.port().mesh

  def evaluate(state, batch):
    sums = lax.psum(_sums(state.params, batch), "data")
    return {**sums, "squared": sums["squared"] * scale}

  return jax.jit(jax.shard_map(evaluate, mesh=mesh, in_specs=(P(), P("data")),
                               out_specs=P()))


def _evaluation(port_step):
  return compare.DeviceEvaluation(
      batch=TEST,
      pmap_step=jax.pmap(lambda s, b: lax.psum(_sums(s.params, b), "batch"),
                         axis_name="batch"),
      port_step=port_step,
      reference_step=jax.jit(lambda s, b: _sums(s.params, b)),
      summarize=lambda sums: {"mse": float(sums["squared"] / sums["count"])},
      metrics=("mse",))


def _port(evaluation_step=None, **changes):
  """The toy port with every new field; `changes` replace fields."""
  fields = dict(
      steps=STEPS, port_name="shard", calibration="row_order",
      pairs=(("pmap", "shard"), ("shard", "reference")),
      device_evaluation=_evaluation(evaluation_step or _mesh_evaluation()))
  return toy_ports.port(**{**fields, **changes})


def test_a_port_named_paired_row_ordered_and_evaluated_on_devices_passes():
  proof = compare.prove(_port(), windows=0, calibration_runs=1)
  report = proof.report
  assert proof.verdict == "pass", proof.first_failure
  assert set(report["runs"]) == {"pmap", "shard", "reference"}
  assert list(report["calibration"]["samples"]) == ["calibration"]
  judged = {(v["a"], v["b"]) for v in report["equivalence"]}
  assert judged == {("pmap", "shard"), ("shard", "reference")}
  assert report["calibration_change"] == "its rows reordered"
  # Each run's own evaluation, on its own devices: pmap's and the port's
  # psum over 8 devices agree to the bit here.
  assert report["runs"]["shard"]["mse"] == report["runs"]["pmap"]["mse"]


def test_a_mistake_in_the_ports_device_evaluation_fails_the_proof():
  proof = compare.prove(_port(_mesh_evaluation(scale=1.01)), windows=0)
  assert proof.verdict == "fail"
  assert "mse" in proof.first_failure and "shard" in proof.first_failure


@pytest.mark.parametrize("changes, field", [
    ({"pairs": (("pmap", "port"),)}, "pairs"),
    ({"port_name": "pmap2"}, "port_name"),
    ({"calibration": "rows"}, "calibration"),
    ({"evaluate": lambda state: {"mse": 0.0}}, "device_evaluation"),
])
def test_each_new_field_refuses_what_it_cannot_be(changes, field):
  with pytest.raises(compare.PortError, match=f"^{field}"):
    compare.prove(_port(**changes), windows=0)


def test_a_device_evaluation_batch_must_split_over_the_mesh():
  port = _port()
  uneven = {"x": _X[:500], "y": _Y[:500]}
  bad = compare.DeviceEvaluation(**{**port.device_evaluation.__dict__,
                                    "batch": uneven})
  with pytest.raises(compare.PortError, match=r"^device_evaluation\.batch"):
    compare.prove(_port(device_evaluation=bad), windows=0)
  assert np.asarray(uneven["x"]).shape[0] % port.mesh.size
