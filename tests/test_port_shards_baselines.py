"""What a `Port` gained so that fsdp is a Port, through the public API only:
pmap's state held as per-device shards (`pmap_specs`) and a run of another
program beside the port (`compare.Baseline`), never planted by a negative
control."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state
from jax import lax
from jax.sharding import PartitionSpec as P

import compare

ROWS, FEATURES, N = 512, 16, 8  # `w` splits over the 8 devices, `b` cannot


def _loss(params, batch):
  return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)


def _init():
  return train_state.TrainState.create(
      apply_fn=None, tx=optax.sgd(0.05, momentum=0.9),
      params={"w": np.zeros(FEATURES, np.float32),
              "b": np.zeros((), np.float32)})


def _specs(state=None):
  """`w` and its momentum split over `data`, the rest whole everywhere."""
  return jax.tree.map(lambda x: P("data") if np.ndim(x) else P(),
                      _init() if state is None else state)


def _port_step(mesh):
  def step(state, batch):  # the specs share the state's own static fields
    return jax.shard_map(_sharded_step("data"), mesh=mesh,
                         in_specs=(_specs(state), P("data")),
                         out_specs=(_specs(state), P()),
                         check_vma=False)(state, batch)
  return jax.jit(step)


def _sharded_step(axis):
  """FSDP's step: gather `w`, reduce-scatter its gradient's mean."""
  def step(state, batch):
    params = {**state.params, "w": lax.all_gather(state.params["w"], axis,
                                                  tiled=True)}
    loss, grads = jax.value_and_grad(_loss)(params, batch)
    grads = {"w": lax.psum_scatter(grads["w"], axis, tiled=True) / N,
             "b": lax.pmean(grads["b"], axis)}
    return state.apply_gradients(grads=grads), {"loss": lax.pmean(loss, axis)}
  return step


def _replicated_step(state, batch):
  loss, grads = jax.value_and_grad(_loss)(state.params, batch)
  grads = lax.pmean(grads, "data")
  return state.apply_gradients(grads=grads), {"loss": lax.pmean(loss, "data")}


def _one_device(state, batch):
  loss, grads = jax.value_and_grad(_loss)(state.params, batch)
  return state.apply_gradients(grads=grads), {"loss": loss}


def _batches(step):
  rng = np.random.default_rng(step)
  x = rng.normal(size=(64, FEATURES)).astype(np.float32)
  return {"x": x, "y": x.sum(axis=1)}


def _port(**changes):
  mesh = jax.make_mesh((N,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  port = compare.Port(
      name="toy_fsdp", init=_init, mesh=mesh, batches=_batches, steps=3,
      pmap_step=jax.pmap(_sharded_step("batch"), axis_name="batch"),
      port_step=_port_step(mesh),
      port_specs=_specs(), pmap_specs=_specs(),
      baselines={"replicated": compare.Baseline(jax.jit(jax.shard_map(
          _replicated_step, mesh=mesh, in_specs=(P(), P("data")),
          out_specs=P(), check_vma=False)))},
      reference_step=jax.jit(_one_device),
      pairs=(("pmap", "port"), ("port", "reference"),
             ("port", "replicated"), ("replicated", "reference")))
  return dataclasses.replace(port, **changes)


def test_pmap_in_shards_beside_a_replicated_baseline_passes():
  proof = compare.prove(_port(), windows=0)
  runs = proof.report["runs"]
  assert proof.verdict == "pass", proof.first_failure
  assert list(runs) == ["pmap", "port", "replicated", "reference"]
  # The pieces reached pmap's devices: `w` and its momentum an eighth each.
  whole = runs["replicated"]["state_bytes_per_device"]
  assert runs["pmap"]["state_bytes_per_device"] == whole - 2 * 4 * (
      FEATURES - FEATURES // N)
  assert runs["pmap"]["state_digest"] == runs["port"]["state_digest"]


def test_a_negative_control_is_planted_in_the_port_never_the_baseline():
  proof = compare.prove(_port(), windows=0, control="update-1pct-from:2")
  failed = {(v["a"], v["b"]) for v in proof.report["equivalence"]
            if v.get("verdict") == "differ"}
  assert proof.verdict == "fail"
  assert ("port", "reference") in failed
  assert ("replicated", "reference") not in failed


@pytest.mark.parametrize("changes, line", [
    ({"pmap_specs": {"params": P("data")}}, r"^pmap_specs: no spec"),
    ({"pmap_specs": jax.tree.map(lambda x: P("data"), _init())},
     r"^pmap_specs: leaf \.step \[\]: .* more axes than the leaf"),
    ({"pmap_specs": jax.tree.map(lambda x: P("batch") if np.ndim(x) else P(),
                                 _init())}, r"^pmap_specs: .*mesh's axes"),
    ({"baselines": [("replicated", None)]}, r"^baselines: a dict"),
    ({"baselines": {"replicated": jax.jit(_one_device)}},
     r"^baselines\['replicated'\]: a compare.Baseline"),
    ({"baselines": {"port": compare.Baseline(_one_device)}},
     r"^baselines: run name 'port'"),
    ({"baselines": {"replicated": compare.Baseline(
        _one_device, specs={"w": P()})}},
     r"^baselines\['replicated'\]\.specs"),
    # Its own evaluation step is read only beside a device_evaluation.
    ({"baselines": {"replicated": compare.Baseline(
        _one_device, evaluation_step=_one_device)}},
     r"^baselines\['replicated'\]\.evaluation_step"),
    # A pmap-side baseline lies as pmap's state does: no mesh specs.
    ({"baselines": {"replicated": compare.Baseline(
        jax.pmap(_one_device), side="pmap", specs=_specs())}},
     r"^baselines\['replicated'\]: specs and evaluation_step"),
])
def test_each_field_refuses_what_it_cannot_be(changes, line):
  with pytest.raises(compare.PortError, match=line):
    compare.prove(_port(**changes), windows=0)
