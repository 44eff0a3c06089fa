"""A `Port` with several ports of one program, and a port's state split over
the mesh (`extra_ports`, `port_specs`), through the public API only.

The program is linear regression with SGD and momentum, pmap'd as the
classic recipe writes it. Its ports: a shard_map step on the replicated
state, and a jit step whose parameters lie split over the mesh (FSDP's
layout: the compiler gathers them). Each is proved against pmap from the
same state on the same batches; a mistake in one of them fails naming it.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax.training import train_state
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import compare
from compare import testing

FEATURES, ROWS, BATCH, STEPS = 16, 1024, 64, 4


def _loss(params, batch):
  prediction = batch["x"] @ params["w"] + params["b"]
  return jnp.mean((prediction - batch["y"]) ** 2)


def _global_step(state, batch, learning_rate=0.05):
  loss, grads = jax.value_and_grad(_loss)(state.params, batch)
  grads = jax.tree.map(lambda g: g * learning_rate / 0.05, grads)
  return state.apply_gradients(grads=grads), {"loss": loss}


def initial_state():
  return train_state.TrainState.create(
      apply_fn=None, tx=optax.sgd(0.05, momentum=0.9),
      params={"w": np.zeros(FEATURES, np.float32),
              "b": np.zeros((), np.float32)})


def batches(step):
  rng = np.random.default_rng(step)
  x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
  return {"x": x, "y": (x @ np.linspace(-1, 1, FEATURES)).astype(np.float32)}


def _mesh():
  return jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))


def _spec_of(x):
  return P("data") if np.ndim(x) and np.shape(x)[0] == FEATURES else P()


def split_specs(state):
  """FSDP's layout: the weights (and their momentum) split over the mesh,
  every other leaf replicated."""
  return jax.tree.map(_spec_of, state)


def fsdp_jit_step(mesh, learning_rate=0.05):
  """The port as a plain jit over the state `split_specs` places: its
  outputs pinned to the same layout, as the next call takes them."""
  def step(state, batch):
    state, metrics = _global_step(state, batch, learning_rate)
    return jax.tree.map(lambda x: lax.with_sharding_constraint(
        x, NamedSharding(mesh, _spec_of(x))), state), metrics
  return jax.jit(step)


def port(**changes):
  mesh = _mesh()
  shard_map_step = jax.jit(jax.shard_map(
      _pmap_step_on("data"), mesh=mesh, in_specs=(P(), P("data")),
      out_specs=P(), check_vma=False))
  right = compare.Port(
      name="layouts", init=initial_state,
      pmap_step=jax.pmap(_pmap_step_on("batch"), axis_name="batch"),
      port_step=shard_map_step, mesh=mesh, batches=batches, steps=STEPS)
  return dataclasses.replace(right, **changes)


def _pmap_step_on(axis):
  def step(state, batch):
    loss, grads = jax.value_and_grad(_loss)(state.params, batch)
    grads = lax.pmean(grads, axis)
    return state.apply_gradients(grads=grads), {"loss": lax.pmean(loss, axis)}
  return step


def split_port(learning_rate=0.05):
  """The jit port on the split state: a Port of its own, since the
  shard_map port takes its state replicated (one layout per Port)."""
  return port(port_step=fsdp_jit_step(_mesh(), learning_rate),
              port_specs=split_specs(initial_state()))


def test_every_extra_port_is_a_run_proved_against_pmap():
  jit_step = jax.jit(_global_step)
  proof = testing.assert_port_equivalent(port(extra_ports={"jit": jit_step}))
  assert set(proof.report["runs"]) == {"pmap", "port", "jit"}
  judged = {(v["a"], v["b"]) for v in proof.report["equivalence"]
            if v["at"] == "lockstep"}
  assert judged == {("port", "pmap"), ("jit", "pmap")}


def test_a_wrong_extra_port_fails_naming_it():
  wrong = jax.jit(lambda s, b: _global_step(s, b, learning_rate=0.0505))
  with pytest.raises(AssertionError, match="first at step 1: jit vs pmap"):
    testing.assert_port_equivalent(port(extra_ports={"jit": wrong}))


def test_a_control_is_planted_in_every_port():
  proof = compare.prove(port(extra_ports={"jit": jax.jit(_global_step)}),
                        windows=0, control="update-1pct-at:3")
  assert proof.verdict == "fail"
  failing = {v["a"] for v in proof.report["equivalence"]
             if v["verdict"] == "differ"}
  assert failing == {"port", "jit"}
  assert proof.first_failure.startswith("first at step 3:")


def test_a_port_on_a_split_state_is_proved_in_its_layout():
  proof = testing.assert_port_equivalent(split_port())
  assert proof.report["runs"]["port"]["state_digest"]


def test_a_split_port_with_a_mistake_fails_at_its_step():
  mistake = split_port(learning_rate=0.0505)
  with pytest.raises(AssertionError, match="first at step 1: port vs pmap"):
    testing.assert_port_equivalent(mistake)
  with pytest.raises(AssertionError, match="first at step 2: port vs pmap"):
    testing.assert_port_equivalent(split_port(), control="update-1pct-at:2")


@pytest.mark.parametrize("changes,message", [
    ({"port_specs": P("model")}, "port_specs: .*model"),
    ({"port_specs": P("data")}, r"port_specs: .*leaf .*step \[\]"),
    ({"port_specs": {"w": P()}}, "port_specs: .*no spec for leaf"),
    ({"port_specs": split_specs(initial_state()).replace(
        params={"w": P(), "b": P(), "c": P()})},
     r"port_specs: .*\['c'\] leads to no leaf"),
    ({"port_specs": initial_state().replace(params=P())},
     "port_specs: .*the spec at .step is a int, not a PartitionSpec"),
    ({"extra_ports": {"port2": jax.jit(_global_step)}},
     "extra_ports: run name 'port2'"),
    ({"extra_ports": {"jit": "no"}}, r"extra_ports\['jit'\] is not callable"),
    ({"extra_ports": [jax.jit(_global_step)]}, "extra_ports: a dict"),
])
def test_a_wrong_layout_or_extra_port_is_one_line(changes, message):
  with pytest.raises(compare.PortError, match=message):
    compare.prove(port(**changes), windows=0)


def test_to_mesh_places_each_leaf_by_the_spec_its_key_path_leads_to():
  mesh = _mesh()
  state = initial_state()
  placed = compare.to_mesh(state, mesh, split_specs(initial_state()))
  assert placed.params["w"].sharding.spec == P("data")
  assert placed.params["b"].sharding.spec == P()
  np.testing.assert_array_equal(np.asarray(placed.params["w"]),
                                state.params["w"])
  # A prefix: one spec for a whole subtree.
  tree = {"params": {"w": np.arange(16.0), "v": np.ones(8)}, "step": 0}
  placed = compare.to_mesh(tree, mesh, {"params": P("data"), "step": P()})
  assert placed["params"]["v"].sharding.spec == P("data")
  assert placed["step"].sharding.spec == P()
  assert compare.to_mesh(tree, mesh)["params"]["w"].sharding.spec == P()
