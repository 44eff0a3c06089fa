"""`read.pipeline_reads` rule by rule: what `--global` does with a batch
generator's yields, its calls and the prefetches of them, each on a small
program rewritten in-process (no program runs: the pipelines that run are
in tests/test_rewrite_pipelines.py). Each test pins a behaviour the
mutation bench found no test noticing (docs/mutation-testing.md).
"""

import pathlib

from compare._src.rewrite import pipeline
from compare._src.rewrite.records import Kind
from tests.test_rewrite_pipeline_units import GENERATOR  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
_SHARDED = GENERATOR.format(yields="yield common_utils.shard(batch)")
_MAIN = ("def main():\n"
         "  for batch in jax_utils.prefetch_to_device(batches(3), 2):\n"
         "    print(float(step(batch)[0]))\n")


def _written(source):
  written = pipeline.rewrite_global_source(source, "gen.py")
  person = [(f.line, f.text) for f in written.findings
            if f.kind == Kind.PERSON]
  return written, person


def test_a_yielded_name_bound_to_a_made_batch_is_placed_where_made():
  # `yield sharded` (a name, not the call): read as the batch it is bound
  # to, placed where it is made. Before, a bare name's `.value` (its
  # string) was read in its stead and the yield refused.
  written, person = _written(GENERATOR.format(
      yields="sharded = common_utils.shard(batch)\n    yield sharded"))
  assert not person, person
  assert ("    sharded = jax.make_array_from_process_local_data(\n"
          "        jax.NamedSharding(mesh, jax.P(\"i\")), batch)\n"
          "    yield sharded\n") in written.code
  assert "  for batch in batches(3):\n" in written.code


def test_a_yielded_tuple_of_names_is_read_element_by_element():
  written, person = _written(GENERATOR.format(
      yields="x = common_utils.shard(batch)\n"
             "    y = common_utils.shard(batch)\n    yield x, y").replace(
                 "for batch in", "for batch, _ in"))
  assert not person, person
  assert "    yield x, y\n" in written.code
  assert written.code.count("= jax.make_array_from_process_local_data(") == 2


def test_a_stacking_generator_called_by_the_loop_itself_is_placed():
  # `for b in batch(..., jax.local_device_count())`: not returned by a
  # function of the file (where `generators` records it), made here.
  path = INPUTS / "device_batched_pipeline.py"
  source = path.read_text().replace(
      "  for step, batch in zip(range(steps), input_pipeline(0)):\n"
      "    params, opt_state, loss = p_train_step(params, opt_state, batch)\n"
      "    print(f\"step {step} loss",
      "  for b in batch(batch(examples(0), PER_DEVICE), "
      "jax.local_device_count()):\n"
      "    params, opt_state, loss = p_train_step(params, opt_state, b)\n"
      "    print(f\"loss")
  written = pipeline.rewrite_global_source(source, str(path))
  assert [f.text for f in written.findings
          if f.line == 71 and f.kind == Kind.CHANGED] == [
              "batch(..., jax.local_device_count()) -> each batch it stacks "
              "[devices, per_device, ...] merged to [devices * per_device, "
              "...] (the same rows on each device) and placed with "
              "NamedSharding(mesh, P(\"devices\")) as it is read"]
  assert ("  for b in (\n"
          "      jax.make_array_from_process_local_data(batch_sharding,\n"
          "          jax.tree.map(lambda _x: _x.reshape((-1,) + "
          "_x.shape[2:]), _batch))\n"
          "      for _batch in batch(batch(examples(0), PER_DEVICE), "
          "jax.local_device_count())):\n") in written.code


def test_a_map_of_the_files_own_splitter_places_each_batch():
  # `map(shard, it)`, `shard` the file's copy of flax's: as
  # `map(common_utils.shard, it)`, each batch placed as it is read.
  source = GENERATOR.format(yields="yield batch").replace(
      "jax_utils.prefetch_to_device(batches(3), 2)",
      "map(shard, batches(3))").replace(
          "\n\ndef batches", "\n\ndef shard(xs):\n  return jax.tree.map("
          "lambda x: x.reshape((jax.local_device_count(), -1) + "
          "x.shape[1:]), xs)\n\n\ndef batches")
  written, person = _written(source)
  assert not person, person
  assert [f.text for f in written.findings if f.line == 27] == [
      "map(shard, ...) -> each global batch placed with "
      "NamedSharding(mesh, P(\"i\")) as it is read"]
  assert "      for _batch in batches(3)):\n" in written.code


def test_a_prefetch_of_a_name_also_a_parameter_keeps_its_reading():
  # `it`, a parameter, rebound to the generator's batches: not bound only
  # to iterators of global batches, so the prefetch is kept, and the
  # iterator it is given asked for by line.
  _, person = _written(_SHARDED.replace(_MAIN, (
      "def main(it=None):\n  it = batches(3)\n"
      "  for batch in jax_utils.prefetch_to_device(it, 2):\n"
      "    print(float(step(batch)[0]))\n")))
  assert person == [(24, (
      "global step not written: it is global batches now: read them in a "
      "for loop or with next() (docs/MIGRATION.md#idiom-map)"))]


def test_a_bare_prefetch_is_flaxs_not_a_call_of_the_files_function():
  # `prefetch_to_device(it, 2)` by its bare name is read as flax's (and
  # dropped), never also as a call of a function of the file of that name
  # whose parameter would take the global batches.
  written, person = _written(_SHARDED.replace(_MAIN, (
      "def prefetch_to_device(it, size):\n  for x in it:\n    yield x\n\n\n"
      "def main():\n  it = batches(3)\n"
      "  for batch in prefetch_to_device(it, 2):\n"
      "    print(float(step(batch)[0]))\n")))
  assert not person, person
  assert "  it = batches(3)\n  for batch in it:\n" in written.code


def test_a_generator_nested_in_a_function_has_its_yields_placed():
  # The yield's own scope (the innermost, `batches`), not the outermost
  # function's (`main`), says it is a batch generator's.
  start, end = _SHARDED.index("def batches(n):"), _SHARDED.index(
      "\n\n\ndef main")
  nested = "\n".join("  " + line if line else line
                     for line in _SHARDED[start:end].split("\n"))
  source = _SHARDED[:start] + _SHARDED[end + 3:].replace(
      "def main():\n", "def main():\n" + nested + "\n\n")
  written, person = _written(source)
  assert not person, person
  assert ("      yield jax.make_array_from_process_local_data(\n"
          "          jax.NamedSharding(mesh, jax.P(\"i\")), batch)\n\n"
          "  for batch in batches(3):\n") in written.code


def test_a_generators_call_inside_a_yield_is_read_and_refused():
  # The yield's value is read too: `batches(1)` there yields global
  # batches once written, which `shard` would split again. Refused by line.
  _, person = _written(_SHARDED.replace(_MAIN, (
      "def again(n):\n  for _ in range(n):\n"
      "    yield common_utils.shard(next(batches(1)))\n\n\n"
      "def main():\n  for batch in again(3):\n"
      "    print(float(step(batch)[0]))\n")))
  assert person == [(24, (
      "global step not written: batches(...) yields global batches now "
      "(placed where they are made) and its value goes where this reading "
      "does not follow it: read it in a for loop, as `x = batches(...)` or "
      "through prefetch_to_device (docs/MIGRATION.md#idiom-map)"))]
