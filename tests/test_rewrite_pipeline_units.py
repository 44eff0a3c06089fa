"""The reading of the team's own batches (`read.pipeline_batches`), unit by
unit, and what `--global` writes or refuses for a pipeline it cannot follow.

Nothing here runs a program: the programs that run are in
tests/test_rewrite_pipelines.py.
"""

import libcst as cst
import pytest

from compare._src.rewrite import pipeline
from compare._src.rewrite.read import global_idioms
from compare._src.rewrite.read import pipeline_batches
from compare._src.rewrite.records import Kind


@pytest.mark.parametrize("code, rows", [
    ("x.reshape(devices, 16, 8)", "x.reshape(-1, 8)"),
    ("x.reshape((jax.local_device_count(), -1))", "x.reshape(-1)"),
    ("np.reshape(x, (devices, 4, 2))", "np.reshape(x, (-1, 2))"),
    ("np.reshape(x, (devices, 4))", "np.reshape(x, (-1,))"),
    ("x.reshape(len(jax.local_devices()), -1, 3, 3)", "x.reshape(-1, 3, 3)"),
    # Not a device count: a number, another name, the global count.
    ("x.reshape(8, 16, 8)", None),
    ("x.reshape(rows, 16, 8)", None),
    ("x.reshape(jax.device_count(), 16, 8)", None),
    # One axis: no per-device rows to merge.
    ("x.reshape(devices)", None),
])
def test_rows_of_a_stacked_batch(code, rows):
  assert pipeline_batches.rows_of(cst.parse_expression(code),
                                  {"devices"}) == rows


def test_a_count_is_a_name_bound_once_to_the_local_device_count():
  module = cst.parse_module(
      "import jax\n"
      "devices = jax.local_device_count()\n"
      "twice = jax.local_device_count()\n"
      "twice = 4\n"
      "def f(param):\n"
      "  param = jax.local_device_count()\n")
  assert pipeline_batches.count_names(module) == {"devices"}


GENERATOR = '''
import functools

import jax
import numpy as np
from flax import jax_utils
from flax.training import common_utils


@functools.partial(jax.pmap, axis_name="i")
def step(batch):
  return jax.lax.pmean(batch["x"].sum(), "i")


def batches(n):
  rng = np.random.default_rng(0)
  for _ in range(n):
    batch = {{"x": rng.normal(size=(8 * jax.local_device_count(), 4))}}
    {yields}


def main():
  for batch in jax_utils.prefetch_to_device(batches(3), 2):
    print(float(step(batch)[0]))
'''


def test_a_generator_of_batches_is_read_as_one():
  module = cst.parse_module(GENERATOR.format(
      yields="yield common_utils.shard(batch)"))
  found, made, _ = pipeline_batches.generators(module,
                                               global_idioms.Known())
  assert list(found) == ["batches"] and len(made) == 1


@pytest.mark.parametrize("yields", [
    # One yield that is not a batch the rewrite places: every caller's
    # batches stay pmap's, and the shard is refused where it cannot be
    # followed, as before.
    "yield common_utils.shard(batch)\n    yield batch",
    # A name bound to a batch and to something else.
    "batch = common_utils.shard(batch)\n    batch = batch\n    yield batch",
])
def test_a_generator_that_yields_other_values_is_refused(yields):
  source = GENERATOR.format(yields=yields)
  assert not pipeline_batches.generators(cst.parse_module(source),
                                         global_idioms.Known())[0]
  written = pipeline.rewrite_global_source(source, "gen.py")
  assert any(f.kind == Kind.PERSON for f in written.findings), [
      f.text for f in written.findings]
  assert "make_array_from_process_local_data" not in written.code


def test_prefetch_of_a_generator_of_global_batches_is_dropped():
  written = pipeline.rewrite_global_source(GENERATOR.format(
      yields="yield common_utils.shard(batch)"), "gen.py")
  assert not any(f.kind == Kind.PERSON for f in written.findings), [
      f.text for f in written.findings]
  assert "for batch in batches(3):" in written.code
  assert "yield jax.make_array_from_process_local_data(" in written.code
  assert "_pmap_" not in written.code


def test_a_map_of_shard_places_each_batch_as_it_is_read():
  """`map(common_utils.shard, it)` read by a `for`: each batch of `it`
  placed as the global batch; the step takes no per-device view."""
  written = pipeline.rewrite_global_source(GENERATOR.format(
      yields="yield batch").replace(
          "jax_utils.prefetch_to_device(batches(3), 2)",
          "map(common_utils.shard, batches(3))"), "gen.py")
  assert not any(f.kind == Kind.PERSON for f in written.findings)
  assert "for _batch in batches(3))" in written.code
  assert "common_utils.shard" not in written.code.split("def main")[1]
  assert "pmap's per-device view" not in written.code


_INPUT_ITER = """


def create_input_iter():
  it = batches(3)
  it = jax_utils.prefetch_to_device(it, 2)
  return it


def main"""


@pytest.mark.parametrize("loop, refused", [
    ("  it = batches(3)\n  it = jax_utils.prefetch_to_device(it, 2)\n"
     "  for batch in it:", False),
    ("  it = batches(3)\n  for batch in jax_utils.prefetch_to_device(it, 2):",
     False),
    # flax imagenet's `create_input_iter`, its prefetch of a generator's.
    ("  it = create_input_iter()\n  for _ in range(3):\n"
     "    batch = next(it)", False),
    # The generator's batches read where the reading does not follow them
    # (its yields are written global): refused, by line.
    ("  for batch in list(batches(3)):", True),
    # `it` may be another iterator: the prefetch is not known to be of
    # global batches, and the reading refuses the mix.
    ("  it = batches(3)\n  if len(str(3)) > 5:\n    it = iter([])\n"
     "  for batch in jax_utils.prefetch_to_device(it, 2):", True),
])
def test_a_prefetch_of_a_name_bound_to_global_batches_is_dropped(
    loop, refused):
  written = pipeline.rewrite_global_source(GENERATOR.format(
      yields="yield common_utils.shard(batch)").replace(
          "  for batch in jax_utils.prefetch_to_device(batches(3), 2):",
          loop).replace("\n\ndef main", _INPUT_ITER), "gen.py")
  person = [f.text for f in written.findings if f.kind == Kind.PERSON]
  assert bool(person) == refused, person
  if not refused:
    assert "prefetch_to_device" not in written.code
    assert "  it = batches(3)\n  return it\n" in written.code
