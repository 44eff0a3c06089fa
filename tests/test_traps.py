"""Runs every trap and idiom the guide shows: the wrong differs, the right holds.

The guide (docs/MIGRATION.md) shows these examples (docs/traps.py,
docs/traps_compiler.py, docs/idioms.py); these tests are why its claims can
be trusted on the pinned jax. No timing is asserted: the slowdowns are
recorded by `python -m docs.build_guide --measure traps`, the structure
behind them is checked.
"""

import importlib.util
import pathlib
import sys

import jax
import numpy as np
import pytest

_DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"


def _load(name):
  spec = importlib.util.spec_from_file_location(f"shardport_docs_{name}",
                                                _DOCS / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up here
  spec.loader.exec_module(module)
  return module


traps = _load("traps")
compiler = traps.traps_compiler
idioms = _load("idioms")
ragged_eval = _load("ragged_eval")


def _allclose(a, b, rtol=1e-5, atol=1e-6):
  return all(jax.tree.leaves(jax.tree.map(
      lambda x, y: np.allclose(x, y, rtol=rtol, atol=atol), a, b)))


def _equal(a, b):
  return all(jax.tree.leaves(jax.tree.map(np.array_equal, a, b)))


def test_gradient_trap_is_n_times_too_large():
  out = traps.gradient_trap()
  for name, grads in out.right.items():
    assert _allclose(grads, out.expected), name
  # Exactly N times: the extra psum adds N equal copies (N a power of two).
  assert _allclose(out.wrong, jax.tree.map(lambda g: traps.N * g,
                                           out.right["check_vma=False"]))
  assert not _allclose(out.wrong, out.expected)
  # JAX-FACTS: check_vma=False is bitwise pmap.
  assert _equal(out.right["check_vma=False"], out.right["pmap"])
  assert out.facts["all-reduce wrong"] > out.facts["all-reduce right"] == 1


@pytest.mark.jax010
def test_explicit_mesh_refuses_what_auto_accepts():
  out = traps.explicit_mesh_trap()
  assert out.facts["axis_types"] == (jax.sharding.AxisType.Explicit,)
  wrong_map = out.wrong["shard_map(host array)"]
  assert isinstance(wrong_map, ValueError)
  assert "does not match the specs of the input" in str(wrong_map)
  assert type(out.wrong["placed[3]"]).__name__ == "ShardingTypeError"
  for name, value in out.right.items():
    np.testing.assert_array_equal(value, out.expected[name])


def test_x0_is_a_collective_and_a_wrong_row_on_the_port():
  out = traps.unreplicate_trap()
  np.testing.assert_array_equal(out.right, out.expected)
  assert out.wrong.shape != out.expected.shape  # the first row, silently
  np.testing.assert_array_equal(out.wrong, out.expected[0])
  assert out.facts["x[0] all-reduces"] == 1
  assert out.facts["x[0] devices"] == traps.N
  assert out.facts["unreplicate devices"] == 1
  assert out.facts["x[0] equals unreplicate"]
  assert out.facts["unreplicate shape, 1 of 8 devices"] == (1, 4, 3)


def test_reducing_psummed_pmap_outputs_again_counts_n_times():
  out = traps.pmap_metrics_trap()
  assert out.right == out.expected
  assert out.wrong == traps.N * out.expected
  assert out.facts["eager sum all-reduces"] == 1
  assert out.facts["eager sum devices"] == traps.N
  np.testing.assert_allclose(out.facts["mean on devices"],
                             out.facts["mean on host"], rtol=1e-6)


@pytest.mark.jax010
def test_jit_vmap_ensemble_all_gathers_and_shard_map_does_not():
  out = compiler.vmap_ensemble_trap()
  assert out.facts["all-gather wrong"] > 0
  assert out.facts["all-gather right"] == 0
  assert out.facts["Explicit mesh"] == "ShardingTypeError"
  # Same numbers either way: the trap is the cost, not the values.
  assert _allclose(out.wrong, out.expected)
  assert _allclose(out.right, out.expected)


def test_scan_keeps_a_loop_and_slow_conv_layouts_on_cpu():
  out = compiler.scan_trap()
  assert out.facts["looped has while"] and not out.facts["unrolled has while"]
  if jax.devices()[0].platform == "cpu":
    assert out.facts["looped other conv layouts"] > 0
    assert out.facts["unrolled other conv layouts"] == 0
  assert _allclose(out.wrong, out.expected, rtol=1e-4, atol=1e-5)
  assert _allclose(out.right, out.expected, rtol=1e-4, atol=1e-5)


@pytest.mark.jax010
def test_naive_reshape_shards_the_microbatch_axis():
  out = compiler.microbatch_reshape_trap()
  assert out.right == out.expected
  assert out.wrong["Auto k=8"][0] == "data"  # microbatches live on devices
  assert out.wrong["Explicit k=8"][0] == "data"
  assert out.wrong["Auto k=4"] == (None,) * 3  # replicated: every device gets all
  assert out.facts["naive Auto all-gathers"] > 0
  assert out.facts["per device Auto all-gathers"] == 0
  assert out.facts["naive Explicit scan"].startswith("ValueError")
  for key in ("naive Auto sum", "per device Auto sum",
              "per device Explicit scan"):
    np.testing.assert_allclose(out.facts[key], out.facts["host sum"],
                               rtol=1e-6)


def test_classic_loss_ties_gradient_scale_to_device_count():
  out = traps.loss_normalisation_trap()
  for n, grads in out.right.items():
    assert _allclose(grads, out.expected), n
  batch = 64
  for n, grads in out.wrong.items():
    # sum within a device, mean across: global sum / n = mean * batch / n
    assert _allclose(grads, jax.tree.map(lambda g: g * batch / n,
                                         out.expected), rtol=1e-4), n
  assert out.facts["grad scale 2->8 devices"] == pytest.approx(0.25)


def test_every_trap_has_a_workload_for_its_figures():
  assert set(traps.WORKLOADS) == {t.__name__ for t in traps.TRAPS}


@pytest.mark.jax010
def test_nested_pmap_fails_on_jax_0_10_and_the_2d_mesh_computes_it():
  out = idioms.nested_pmap_as_2d_mesh()
  assert isinstance(out["legacy"], ValueError)
  assert "should match the mesh passed to shard_map" in str(out["legacy"])
  np.testing.assert_allclose(out["ported"], out["expected"], rtol=1e-6)
  assert out["mesh shape"] == {"outer": 2, "inner": 4}


def test_staged_helpers_replace_the_removed_device_put_helpers():
  out = idioms.staged_migration()
  n = traps.N
  np.testing.assert_array_equal(out["replicated"]["w"],
                                np.tile(np.arange(3.0), (n, 1)))
  np.testing.assert_array_equal(out["sharded"], out["shards"])
  # shard i lives on pmap's device i, as device_put_sharded placed it
  devices = idioms.pmap_devices()
  for shard in out["sharded"].addressable_shards:
    i = shard.index[0].start
    assert shard.device == devices[i]
    np.testing.assert_array_equal(shard.data[0], out["shards"][i])
  np.testing.assert_array_equal(out["pmap(sharded)"], 2 * out["shards"])
  # the global array keeps each device's block where it was
  assert out["global"].shape == (n * 3,)
  np.testing.assert_array_equal(out["global"], 2 * out["shards"].ravel())
  assert out["global"].sharding.spec == jax.sharding.PartitionSpec("data")
  np.testing.assert_array_equal(out["back to pmap"], 4 * out["shards"])


def test_pmap_squeezes_the_device_axis_and_shard_map_keeps_it():
  out = idioms.what_the_body_sees(b=4, d=3)
  assert out["pmap body shape of [N]"] == ()
  assert out["shard_map body shape of [N]"] == (1,)
  assert out["pmap body shape"] == out["shard_map body shape"] == (4, 3)
  assert out["pmap axis_index"] == list(range(traps.N))
  assert out["shard_map axis_index"] == list(range(traps.N))
  assert out["pmap out shape"] == out["shard_map out shape"] == (traps.N,)


def test_the_ports_avoid_the_traps_the_guide_shows(digits):
  """The traps above, checked on sharded/ itself, not on examples."""
  from compare._src.measure import hlo  # pylint: disable=g-import-not-at-top
  from sharded import accumulation  # pylint: disable=g-import-not-at-top
  from sharded import data_parallel  # pylint: disable=g-import-not-at-top
  from shardport.workloads import batches  # pylint: disable=g-import-not-at-top
  from shardport.workloads import configs  # pylint: disable=g-import-not-at-top
  placement = data_parallel.make_placement(traps.N)
  # The Explicit trap: the port's mesh is Auto on purpose.
  assert set(placement.axis_types) == {jax.sharding.AxisType.Auto}
  shape = dict(dataset=digits.name, input_shape=digits.train_inputs.shape[1:],
               global_batch=64)
  host = next(batches.train_batches(digits, 0, 64, 1))
  for module, config in (
      (data_parallel, configs.TrainConfig(**shape)),
      (accumulation, configs.AccumulationConfig(**shape, accum_steps=2,
                                                accum_loop="scan_unroll"))):
    state = module.create_state(0, config, placement)
    batch = module.put_batch(host, placement)
    for variant in module.VARIANTS:
      step = module.make_train_step(config, placement, variant)
      run = hlo.executed(step.lower(state, batch).compile().as_text())
      # The gradient trap would add all-reduces; a microbatch split that
      # moved data (the reshape trap) would add all-gathers.
      assert run.collectives["all-reduce"] == 1, (module.__name__, variant)
      assert run.collectives["all-gather"] == 0, (module.__name__, variant)


def test_a_ragged_eval_batch_is_padded_and_cut_alike():
  # 37 rows on 8 devices: flax's pad_shard_unpad around pmap, and the
  # mesh's own padding (docs/MORE-IDIOMS.md#ragged-eval), give one device's
  # logits for every row and no more.
  before, after, one = ragged_eval.ragged_predictions(rows=37)
  assert before.shape == after.shape == one.shape == (37, 3)
  np.testing.assert_allclose(after, one, rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(before, one, rtol=1e-6, atol=1e-6)


def test_the_ragged_eval_port_compiles_once():
  # Two calls whose rows pad to the same shape reuse one compiled step
  # (the guide's "build once"): a jit built inside the call would compile
  # on each.
  mesh = jax.make_mesh((jax.device_count(),), ("data",))
  params = {"w": np.ones((5, 3), np.float32), "b": np.zeros(3, np.float32)}
  for rows in (37, 38):
    ragged_eval.predict_on_mesh(params, np.ones((rows, 5), np.float32), mesh)
  assert ragged_eval.predict_on(mesh)._cache_size() == 1  # pylint: disable=protected-access
