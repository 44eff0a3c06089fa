"""Runs the idioms docs/MORE-IDIOMS.md adds: code that inspects pmap objects,
and per-device loops of different lengths, on 8 emulated devices.

Each claim the page makes is asserted here, with a check that can fail:
the inspected text holds the collective, the wrapped function is the step,
the per-device loops run each device's own trips, and the global loop runs
the longest row's trips with an all-reduce inside the loop, and a state
donated in another sharding than the step returns stays alive. Static
arguments and a closed-over table ported, and the collectives recipe (what
only a port runs shows). The many-hosts main: tests/test_many_hosts.py.
"""

import jax
import numpy as np
import pytest

from compare._src.measure import hlo
from tests.test_traps import _load

pmap_objects = _load("pmap_objects")
uneven_loops = _load("uneven_loops")
donation = _load("donation")


def _mesh():
  return jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))


def test_a_pmap_object_and_its_port_are_inspected_alike():
  stacked = np.arange(16, dtype=np.float32).reshape(8, 2)
  before_text, before_fn = pmap_objects.inspect_pmap(stacked)
  after_text, after_fn = pmap_objects.inspect_port(_mesh(), (16,))
  assert before_fn is pmap_objects.step and after_fn is pmap_objects.step
  for text in (before_text, after_text):
    assert hlo.executed(text).collectives["all-reduce"] == 1
  # Both texts are the per-device program: its block of 2 of the 16 rows.
  for text in (before_text, after_text):
    entry = text[text.index("ENTRY"):]
    assert "f32[2]" in entry and "f32[16]" not in entry


def _values():
  # Device d's two rows need d and d + 1 halvings: device 7 the most (8).
  rows = [[2.0 ** d, 2.0 ** (d + 1)] for d in range(8)]
  return np.asarray(rows, np.float32)


def test_each_device_runs_its_own_trips_under_pmap_and_shard_map():
  stacked = _values()
  counts, trips = uneven_loops.per_device_pmap(stacked)
  port_counts, port_trips = uneven_loops.per_device_port(_mesh(),
                                                         stacked.ravel())
  expected = [[d + 1, d + 2] for d in range(8)]
  np.testing.assert_array_equal(np.asarray(counts), expected)
  np.testing.assert_array_equal(np.asarray(port_counts).reshape(8, 2),
                                expected)
  own = [d + 2 for d in range(8)]  # each device's longest row
  np.testing.assert_array_equal(np.asarray(trips), own)
  np.testing.assert_array_equal(np.asarray(port_trips), own)


def test_the_global_loop_runs_the_longest_rows_trips_with_an_all_reduce():
  mesh, values = _mesh(), _values().ravel()
  counts, trips = uneven_loops.global_jit(mesh, values)
  np.testing.assert_array_equal(np.asarray(counts).reshape(8, 2),
                                [[d + 1, d + 2] for d in range(8)])
  assert int(trips) == 9  # every device: the longest row's trips
  placed = jax.device_put(values, jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec("data")))
  global_text = jax.jit(uneven_loops.halvings).lower(placed).compile() \
      .as_text()
  port_text = jax.jit(jax.shard_map(
      lambda rows: uneven_loops.halvings(rows)[0], mesh=mesh,
      in_specs=jax.sharding.PartitionSpec("data"),
      out_specs=jax.sharding.PartitionSpec("data"),
      check_vma=False)).lower(placed) \
      .compile().as_text()
  in_loops = lambda text: sum(
      count for name, count in hlo.collectives_by_computation(text).items()
      if name != hlo.ENTRY)
  assert in_loops(global_text) >= 1  # the condition's all-reduce, each trip
  assert in_loops(port_text) == 0


def test_a_state_donated_in_another_sharding_stays_alive_beside_the_new():
  mesh = _mesh()
  with pytest.warns(UserWarning, match="Some donated buffers were not usable"):
    kept, new = donation.donate_replicated(mesh, donation.host_state())
  assert not kept.is_deleted()  # two states alive: twice the memory
  np.testing.assert_array_equal(np.asarray(new), 0.5)
  consumed, new = donation.donate_in_place(mesh, donation.host_state())
  assert consumed.is_deleted()  # the step reused its buffers
  np.testing.assert_array_equal(np.asarray(new), 0.5)


static_args = _load("static_args")


@pytest.mark.parametrize("squared", [True, False])
def test_static_arguments_and_a_closed_over_table_ported(squared):
  # docs/MORE-IDIOMS.md#static-args: pmap's static_broadcasted_argnums and
  # closed-over weights against jit's static_argnums and the weights as a
  # P() argument: the same loss (summation order only), and a second call
  # with the same flag compiles nothing new.
  before, after, loss, args = static_args.both(squared)
  np.testing.assert_allclose(after, before, rtol=1e-6)
  assert before != static_args.both(not squared)[0]  # the flag matters
  loss(*args)
  assert loss._cache_size() == 1  # pylint: disable=protected-access


collectives_recipe = _load("collectives_recipe")


def test_the_collectives_recipe_finds_what_only_the_port_runs():
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  n = jax.device_count()
  mesh = jax.make_mesh((n,), ("b",))

  def body(w, x):
    grad = jax.grad(lambda w: ((x @ w) ** 2).mean())(w)
    return w - 0.1 * jax.lax.pmean(grad, "b")

  w, x = np.ones((16, 4), np.float32), np.ones((8 * n, 16), np.float32)
  pmapped = jax.pmap(body, axis_name="b")
  port = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("b")),
                               out_specs=P(), check_vma=False))
  # A port that takes the batch whole and gathers it back: the gather shows.
  gathered = jax.jit(jax.shard_map(
      lambda w, x: body(w, jax.lax.all_gather(x, "b", tiled=True)),
      mesh=mesh, in_specs=(P(), P("b")), out_specs=P(), check_vma=False))
  stacked = (np.broadcast_to(w, (n, 16, 4)), x.reshape(n, 8, 16))
  placed = (jax.device_put(w, NamedSharding(mesh, P())),
            jax.device_put(x, NamedSharding(mesh, P("b"))))
  before = collectives_recipe.collectives(pmapped, *stacked)
  assert before == collectives_recipe.collectives(port, *placed)
  assert [c[0] for c in before] == ["all-reduce"]
  assert before[0][2] == 16 * 4 * 4  # the gradient's bytes
  extra = collectives_recipe.collectives(gathered, *placed)
  assert [c[0] for c in extra] == ["all-gather", "all-reduce"], extra
