"""Runs every need the guide shows (docs/needs*.py) and checks what it claims.

Batch norm, dropout keys and threefry, prefetching, resharding, compiling
once, fetching one copy, scan carries, nested pmap and the pmap escape
hatch, on the pinned jax (0.10.2) and 8 emulated devices. The regions must
also stand alone after the guide's import block (docs/page_imports.py,
stated once on the page): each defines every other name it uses.
"""

import ast
import builtins
import pathlib

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from docs import needs
from docs import needs_placement as placement
from docs import needs_runtime as runtime
from docs.guide.sources import regions

_DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
_FILES = ("needs.py", "needs_placement.py", "needs_runtime.py")
_TAGS = {"batchnorm-axis-name", "dropout-keys", "prefetch", "reshard",
         "build-once", "build-once-pmap", "cheap-fetch", "scan-carry-vma",
         "nested-pmap", "escape-hatch"}


def _all_regions():
  return {(name, tag): text for name in _FILES
          for tag, text in regions(_DOCS / name).items()}


def _unbound(source):
  """Names `source` reads that it never binds (anywhere) or imports."""
  tree = ast.parse(source)
  bound, read = set(dir(builtins)), set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Name):
      (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      bound.add(node.name)
    elif isinstance(node, ast.arg):
      bound.add(node.arg)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      bound.update((a.asname or a.name).split(".")[0] for a in node.names)
  return read - bound


def test_every_region_is_there_and_stands_alone():
  found = _all_regions()
  assert {tag for _, tag in found} == _TAGS
  imports = regions(_DOCS / "page_imports.py")["migration-imports"]
  for (name, tag), text in found.items():
    assert _unbound(imports + "\n" + text) == set(), (name, tag)
    assert len(text.splitlines()) <= 22, (name, tag)  # what a reader copies
    # pylint: disable-next=exec-used
    exec(compile(imports + "\n" + text, f"{name}#{tag}", "exec"), {})


def test_batchnorm_axis_name_is_the_mesh_axis_in_a_port():
  out = needs.batchnorm()
  (pmap_y, pmap_stats), (port_y, port_stats) = out["pmap"], out["port"]
  np.testing.assert_allclose(port_y, pmap_y, atol=1e-6)
  for a, b in zip(jax.tree.leaves(port_stats), jax.tree.leaves(pmap_stats)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  if jax.devices()[0].platform == "cpu":  # measured: bitwise on XLA:CPU
    assert np.array_equal(port_y, pmap_y)
  # The statistics of the global batch, as on one device (another order
  # of the sums: rounding apart).
  whole_y, whole_stats = out["one device, global batch"]
  np.testing.assert_allclose(port_y, whole_y, atol=1e-5)
  for a, b in zip(jax.tree.leaves(port_stats), jax.tree.leaves(whole_stats)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
  # Without axis_name each device normalises by its own statistics.
  local_y, local_stats = out["port, axis_name=None"]
  assert np.abs(local_y - port_y).max() > 0.1
  means = np.asarray(local_stats["mean"]).reshape(needs.N, -1)
  assert len({tuple(m) for m in means}) == needs.N
  err = out["axis_name=None, stats P()"]
  assert isinstance(err, ValueError)
  assert "out_specs which require replication which can't be statically " \
         "inferred" in str(err)


def test_dropout_key_per_device_matches_pmap():
  masks = needs.dropout_keys()
  np.testing.assert_array_equal(masks["port"], masks["pmap"])
  rows = {m.tobytes() for m in masks["port"]}
  assert len(rows) == needs.N  # every device its own mask
  assert len({m.tobytes() for m in masks["port, no fold_in"]}) == 1
  assert 0.2 < masks["port"].mean() < 0.8


def test_threefry_partitionable_is_on_and_split_draws_agree():
  out = needs.threefry_sharding()
  assert out["default"] is True and out["after"] is True
  assert out[True]["same for both splits"]
  assert out[True]["collectives when split"] == 0
  # False: the same numbers whatever the split, but devices talk.
  assert out[False]["same for both splits"]
  assert out[False]["collectives when split"] > 0
  assert out["values differ"]  # the flag changes the numbers themselves


def test_threefry_flag_changes_what_a_key_gives():
  assert needs.threefry_values() == {"split": True, "fold_in": False,
                                     "pmap dropout masks": True}
  assert jax.config.jax_threefry_partitionable is True  # restored


def test_prefetch_puts_batches_ahead_on_the_mesh():
  out = needs.prefetched()
  assert out["read at first"] == 2  # two batches on devices, one in use
  assert len(out["device"]) == len(out["host"])
  for host, device in zip(out["host"], out["device"]):
    for key in host:
      np.testing.assert_array_equal(np.asarray(device[key]), host[key])
      assert device[key].sharding.spec == P("data")
      assert device[key].sharding.mesh.axis_names == ("data",)
  # flax 0.12.8 keeps both helpers, for pmap's layout.
  assert out["flax prefetch_to_device"] and out["flax shard"]
  assert out["flax batch"].shape == (needs.N, 2, 3)
  assert out["flax batch"].sharding.mesh.axis_names == (
      "_device_put_sharded",)


@pytest.mark.jax010
def test_in_specs_refuses_other_placements_on_explicit_meshes_only():
  out = placement.reshard_facts()
  assert out["explicit axis types"] == (jax.sharding.AxisType.Explicit,)
  for name in ("explicit", "auto"):
    for value in out[name]:  # outside jit and inside
      np.testing.assert_array_equal(np.asarray(value), out["expected"])
  err = out["explicit, as placed"]
  assert isinstance(err, ValueError)
  assert str(err).startswith("in_specs passed to shard_map: P('data',) does "
                             "not match the specs of the input: P(None,)")
  assert "use `jax.reshard`" in str(err)
  assert "can only refer to Auto axes" in str(
      out["explicit, with_sharding_constraint"])
  assert "cannot contain axis names that are of type Auto" in str(
      out["auto, jax.reshard"])
  # Auto: in_specs reshards silently, at a cost when the split moves.
  np.testing.assert_array_equal(out["auto, as placed"], out["expected"])
  assert out["auto all-to-alls, replicated in"] == 0
  assert out["auto all-to-alls, columns in"] == 1
  assert out["jax.reshard is jax.sharding.reshard"]


@pytest.mark.jax010
def test_building_once_compiles_once():
  assert placement.compile_counts() == {
      "port, rebuilt each step": 3, "port, built once": 1,
      "pmap, replicate default": 2, "pmap, replicate axis_name='batch'": 1}


def test_one_copy_is_fetched_without_the_others():
  out = runtime.fetches()
  for value in (*out["pmap"], *out["port"], out["unreplicate"]):
    np.testing.assert_array_equal(value, out["expected"])
  assert out["device_get rows"] == (needs.N, 3)  # every copy
  assert out["shard 0 rows"] == (1, 3)  # one
  assert out["port fully replicated"]
  # out_axes=None checks nothing: device 0's value, the others differ.
  np.testing.assert_array_equal(out["unreduced, out_axes=None"],
                                out["device 0's rows"])
  assert len({c.tobytes() for c in out["unreduced copies"]}) == needs.N


@pytest.mark.jax010
def test_replicated_scan_carry_is_a_type_error_and_pcast_fixes_it():
  mesh = needs.auto_mesh()
  x = jax.device_put(np.arange(32, dtype=np.float32),
                     NamedSharding(mesh, P("data")))
  with pytest.raises(TypeError, match=(
      r"^scan body function carry input and carry output must have equal "
      r"types, but they differ:")) as err:
    runtime.replicated_carry_sums(mesh)(x)
  assert "jax.lax.pcast(..., ('data',), to='varying')" in str(err.value)
  out = runtime.scan_carries()
  for name in ("pcast", "zeros_like", "check_vma=False"):
    np.testing.assert_array_equal(out[name], out["expected"])
  assert not out["lax.pvary exists"]


@pytest.mark.jax010
def test_nested_pmap_fails_and_three_ports_compute_member_means():
  out = runtime.nested_pmaps()
  assert isinstance(out["nested pmap"], ValueError)
  assert "should match the mesh passed to shard_map" in str(
      out["nested pmap"])
  assert out["jax.smap exists"]
  for name in ("2-D mesh", "nested shard_map", "nested smap"):
    np.testing.assert_allclose(out[name], out["expected"], rtol=1e-6)
  # The inner shard_map takes the abstract mesh, smap the context's.
  assert "should match the mesh passed to shard_map" in str(
      out["nested shard_map, concrete mesh inside"])
  assert "context mesh cannot be empty" in str(
      out["nested smap, no set_mesh"])


@pytest.mark.jax010
def test_escape_hatch_forms_on_jax_0_10():
  out = runtime.escape_hatch()
  ignored = out["environment"]
  assert ignored["returncode"] == 0, ignored
  assert ignored["report"] == {
      "runtime": "shard_map", "option": False,
      "warning": f"JAX_PMAP_SHMAP_MERGE=0 is ignored: jax {jax.__version__} "
                 "has no such switch (removed in jax 0.10.0); pmap runs on "
                 "shard_map"}
  update = out["config.update"]
  assert update["returncode"] == 1 and update["report"] is None
  assert update["stderr"][-1] == (
      "AttributeError: Unrecognized config option: jax_pmap_shmap_merge")
  app = out["absl app"]
  assert app["returncode"] == 1 and app["report"] is None
  assert ("FATAL Flags parsing error: Unknown command line flag "
          "'jax_pmap_shmap_merge'") in app["stderr"]
  parsed = out["parse_flags_with_absl"]
  assert parsed["returncode"] == 0, parsed
  assert parsed["report"] == {"runtime": "shard_map", "warning": None,
                              "option": False}
  assert runtime.check_pmap_runtime() == "shard_map"  # this process
