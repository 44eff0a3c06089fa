"""`compare._src.prove.host_copies`: a run's state read from its devices.

A `DeviceLeaf` reads as the value `to_host` would fetch (a stacked leaf's
first row, 0-d arrays too), holds one device's buffer, and never makes a
host copy the engine keeps, except `kept` (the shared state).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from compare._src.prove import host_copies


def _mesh():
  return jax.make_mesh((8,), ("d",))


def test_a_replicated_leaf_reads_as_its_value_from_one_device():
  x = jax.device_put(jnp.arange(6.0).reshape(2, 3),
                     NamedSharding(_mesh(), P()))
  leaf = host_copies.device_leaf(x)
  assert isinstance(leaf, host_copies.DeviceLeaf)
  assert len(leaf.array.devices()) == 1  # the other 7 copies not held
  assert (leaf.shape, leaf.ndim, leaf.size, leaf.dtype) == (
      (2, 3), 2, 6, np.float32)
  np.testing.assert_array_equal(np.asarray(leaf), np.arange(6.0).reshape(2, 3))
  assert np.asarray(leaf, np.float64).dtype == np.float64
  assert np.array(leaf).flags.owndata  # a copy asked for is a copy


def test_a_stacked_leaf_reads_as_its_first_row_a_0d_array_too():
  rows = jnp.arange(8, dtype=jnp.int32)  # a per-device step counter
  stacked = jax.device_put(rows, NamedSharding(_mesh(), P("d")))
  leaf = host_copies.device_leaf(stacked, stacked=True)
  assert leaf.shape == () and leaf.size == 1 and leaf.ndim == 0
  value = np.asarray(leaf)
  assert isinstance(value, np.ndarray) and value.shape == () and value == 0
  assert host_copies.device_leaf(np.array([[4, 5]] * 8), stacked=True
                                 ).tolist() == [4, 5]


def test_a_leaf_split_over_the_devices_is_fetched_whole():
  x = jax.device_put(jnp.arange(16.0), NamedSharding(_mesh(), P("d")))
  leaf = host_copies.device_leaf(x)
  assert isinstance(leaf, np.ndarray) and leaf.tolist() == list(range(16))


def test_kept_copies_device_leaves_and_leaves_numpy_states_as_they_are():
  numpy_state = {"params": {"w": np.ones(3)}}
  assert host_copies.kept(numpy_state) is numpy_state
  x = jax.device_put(jnp.ones(3), NamedSharding(_mesh(), P()))
  read = {"params": {"w": host_copies.device_leaf(x)}, "step": np.int32(1)}
  kept = host_copies.kept(read)
  assert isinstance(kept["params"]["w"], np.ndarray)
  assert kept["params"]["w"].flags.owndata  # outlives the device buffer
  assert kept["step"] is read["step"]
  placed = host_copies.read(read)
  assert isinstance(placed["params"]["w"], np.ndarray)
  assert not placed["params"]["w"].flags.owndata  # XLA:CPU: a view


def test_of_asks_the_module_for_its_view_else_its_copy():
  class Copying:
    def to_host(self, state):
      return {"copied": state}

  class Viewing(Copying):
    def host_view(self, state):
      return {"viewed": state}

  assert host_copies.of(Copying(), 1) == {"copied": 1}
  assert host_copies.of(Viewing(), 1) == {"viewed": 1}


def test_a_planted_port_run_is_read_as_the_unplanted_one_is():
  # A negative control replaces one function of a run; the run's own view
  # (`host_view`: the state read on the devices, no host copy) stays, for
  # every control a Port offers (a lost view copied through `to_host`).
  from compare._src.prove import port as port_module  # pylint: disable=g-import-not-at-top
  from compare._src.prove import port_runs  # pylint: disable=g-import-not-at-top
  from tests import toy_ports  # pylint: disable=g-import-not-at-top
  port = toy_ports.port(steps=4, evaluate=lambda s: {"w0": 0.0})
  from compare._src.prove import plan as plan_module  # pylint: disable=g-import-not-at-top
  from shardport.strategies import negative_controls  # pylint: disable=g-import-not-at-top
  checked = port_module.check(port)
  plan = port_runs.plan(checked)
  run = plan.run("port").module
  state = run.create_state(0, port_runs.config_of(checked),
                           run.make_placement(8))
  names = [c.name for c in plan.negative_controls]
  assert "evaluation-1pct" in names
  for name in names:
    control = negative_controls.chosen(
        plan.negative_controls,
        name if name == "evaluation-1pct" else f"{name}:2", plan.name)
    planted = plan_module.planted(plan, control).run("port").module
    assert plan.run("port").module is run  # the unplanted plan unchanged
    assert planted.host_view.__func__ is run.host_view.__func__, name
    leaves = jax.tree.leaves(host_copies.of(planted, state))
    assert leaves and all(isinstance(x, host_copies.DeviceLeaf)
                          for x in leaves), name
