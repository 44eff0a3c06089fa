"""The reading of the team's own batches (`read.pipeline_batches`), unit by
unit, and what `--global` writes or refuses for a pipeline it cannot follow.

Nothing here runs a program: the programs that run are in
tests/test_rewrite_pipelines.py.
"""

import pathlib

import libcst as cst
import pytest

from compare._src.rewrite import pipeline
from compare._src.rewrite.read import global_idioms
from compare._src.rewrite.read import pipeline_batches
from compare._src.rewrite.records import Kind
from compare._src.rewrite.write import pipeline_written


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


INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"


def _rewritten(name):
  """tests/rewrite_inputs/NAME.py's `--global` rewrite, in-process (the
  programs run in tests/test_rewrite_pipelines.py)."""
  path = INPUTS / f"{name}.py"
  return pipeline.rewrite_global_source(path.read_text(), str(path))


def _function(code, name):
  """The source of `def name` in `code`, to the next top-level line."""
  start = code.index(f"\ndef {name}(") + 1
  return code[start:code.index("\n\n\n", start)]


def test_a_stacked_yield_is_placed_where_made_one_batch_a_line():
  written = _rewritten("stacked_batches")
  assert _function(written.code, "batches").split("\n")[-4:] == [
      "    yield (jax.make_array_from_process_local_data(batch_sharding,",
      " " * 50 + "x.reshape(-1, 8)),",
      "           jax.make_array_from_process_local_data(batch_sharding,",
      " " * 50 + "y.reshape(-1, 4)))"]
  assert [f.text for f in written.findings if f.line == 36] == [
      "a batch stacked [devices, per_device, ...] by the pipeline -> "
      "jax.make_array_from_process_local_data(NamedSharding(mesh, "
      "P(\"batch\")), its rows [devices * per_device, ...]): the global "
      "batch where it is made, each device the rows pmap gave it"] * 2


def test_a_generator_stacking_by_the_device_count_yields_global_batches():
  written = _rewritten("device_batched_pipeline")
  assert _function(written.code, "input_pipeline").split("\n")[1:] == [
      "  ds = batch(examples(seed), PER_DEVICE)",
      "  return (",
      "      jax.make_array_from_process_local_data(",
      "          jax.NamedSharding(mesh, jax.P(\"devices\")),",
      "          jax.tree.map(lambda _x: _x.reshape((-1,) + _x.shape[2:]), "
      "_batch))",
      "      for _batch in batch(ds, jax.local_device_count()))"]
  assert [f.text for f in written.findings
          if f.line == 43 and f.kind == Kind.CHANGED] == [
              "batch(..., jax.local_device_count()) -> each batch it stacks "
              "[devices, per_device, ...] merged to [devices * per_device, "
              "...] (the same rows on each device) and placed with "
              "NamedSharding(mesh, P(\"devices\")) as it is read"]


@pytest.mark.parametrize("source, written", [
    # 66 characters: the longest on one line.
    ("abcde", "(jax.make_array_from_process_local_data(s, b) "
     "for _batch in abcde)"),
    ("abcdef", "(\n    jax.make_array_from_process_local_data(s, b)"
     "\n    for _batch in abcdef)"),
])
def test_a_generator_of_global_batches_on_one_line_where_it_fits(
    source, written):
  assert cst.Module([]).code_for_node(pipeline_written.generator(
      "s", "b", source)) == written


def test_a_placed_call_is_aligned_after_its_parenthesis_where_too_long():
  # pylint: disable=protected-access
  call = "f(aaaa, g(b, c), [d, e])"
  assert pipeline_written._aligned(call, 4, 4) == call
  assert pipeline_written._aligned(call, 70, 4) == (
      "f(aaaa,\n" + " " * 68 + "g(b, c),\n" + " " * 68 + "[d, e])")
  assert pipeline_written._split("a, g(b, c), [d, e]") == [
      "a", " g(b, c)", " [d, e]"]


_LOOP = ("def main():\n"
         "  for batch in jax_utils.prefetch_to_device(batches(3), 2):\n"
         "    print(float(step(batch)[0]))\n")


@pytest.mark.parametrize("loop, kept", [
    # At the module's top level: its scope is the module's.
    ("it = batches(3)\nit = jax_utils.prefetch_to_device(it, 2)\n"
     "for batch in it:\n  print(float(step(batch)[0]))\n",
     "\nit = batches(3)\nfor batch in it:\n"),
    # A prefetch named as flax's function itself.
    ("def main():\n  it = batches(3)\n"
     "  for batch in prefetch_to_device(it, 2):\n"
     "    print(float(step(batch)[0]))\n",
     "  it = batches(3)\n  for batch in it:\n"),
    # A parameter: batches the caller stacked, not the generator's, each
    # placed as it is read (a prefetch of pmap's own layout).
    ("def main(it):\n  for batch in jax_utils.prefetch_to_device(it, 2):\n"
     "    print(float(step(batch)[0]))\n",
     "_x.reshape((-1,) + _x.shape[2:]), _batch))\n      for _batch in it):"),
])
def test_where_a_prefetch_of_a_named_iterator_is_dropped(loop, kept):
  source = GENERATOR.format(yields="yield common_utils.shard(batch)")
  source = source.replace(_LOOP, loop).replace(
      "from flax import jax_utils\n",
      "from flax import jax_utils\nfrom flax.jax_utils import "
      "prefetch_to_device\n")
  written = pipeline.rewrite_global_source(source, "gen.py")
  assert not [f.text for f in written.findings if f.kind == Kind.PERSON]
  assert kept in written.code, written.code
  assert "prefetch_to_device(" not in written.code.split("def step")[1]


def test_a_generators_batches_read_where_not_followed_are_named_by_line():
  source = GENERATOR.format(yields="yield common_utils.shard(batch)").replace(
      "  for batch in jax_utils.prefetch_to_device(batches(3), 2):",
      "  for batch in list(batches(3)):")
  written = pipeline.rewrite_global_source(source, "gen.py")
  assert [(f.line, f.text) for f in written.findings
          if f.kind == Kind.PERSON] == [(23, (
              "global step not written: batches(...) yields global batches "
              "now (placed where they are made) and its value goes where "
              "this reading does not follow it: read it in a for loop, as "
              "`x = batches(...)` or through prefetch_to_device "
              "(docs/MIGRATION.md#idiom-map)"))]


def test_a_prefetch_of_a_module_iterator_in_a_function_is_refused():
  # `it` is bound at the module's top, not in main: the prefetch is not
  # known to be of an iterator of global batches there, and stays a read.
  source = GENERATOR.format(yields="yield common_utils.shard(batch)").replace(
      _LOOP.split("    print")[0], "it = batches(3)\n\n\ndef main():\n"
      "  for batch in jax_utils.prefetch_to_device(it, 2):\n")
  written = pipeline.rewrite_global_source(source, "gen.py")
  assert [(f.line, f.text) for f in written.findings
          if f.kind == Kind.PERSON] == [(26, (
              "global step not written: it is global batches now: read them "
              "in a for loop or with next() (docs/MIGRATION.md#idiom-map)"))]


def test_a_stacking_generators_batches_returned_by_name_are_asked_for():
  # `batches = batch(ds, jax.local_device_count())`: global batches once
  # written, returned by input_pipeline, which main reads in a zip the
  # reading does not follow: asked for by line.
  path = INPUTS / "device_batched_pipeline.py"
  source = path.read_text().replace(
      "  return batch(ds, jax.local_device_count())",
      "  batches = batch(ds, jax.local_device_count())\n  return batches")
  written = pipeline.rewrite_global_source(source, str(path))
  assert [(f.line, f.text) for f in written.findings
          if f.kind == Kind.PERSON] == [(72, (
              "global step not written: input_pipeline returns global "
              "batches (line 44): call it as `x = input_pipeline(...)` so "
              "that it can be followed (docs/REWRITE.md#functions)"))]
