"""`write.pipeline_written` rule by rule: what `--global` writes where the
program's pipeline makes its batches, on small inputs rewritten in-process
(no program runs: tests/test_rewrite_pipelines.py runs them). Each test
pins a behaviour the mutation bench found no test noticing
(docs/mutation-testing.md).
"""

import pathlib

import libcst as cst

from compare._src.rewrite import pipeline
from compare._src.rewrite.records import Kind
from compare._src.rewrite.write import pipeline_written
from tests.test_rewrite_pipeline_units import GENERATOR  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"


def test_a_placed_generator_wraps_its_call_past_72_columns():
  # The call `jax.make_array_from_process_local_data(s, b...)` is 76
  # characters here: wrapped at 72 (it sits 4 in, the generator's `for`
  # below it), though it would fit 79.
  assert cst.Module([]).code_for_node(pipeline_written.generator(
      "s", "b" * 33, "it")) == (
          "(\n    jax.make_array_from_process_local_data(s,\n"
          "        " + "b" * 33 + ")\n    for _batch in it)")


def test_a_stacking_call_by_a_count_name_is_said_with_that_name():
  # `devices = jax.local_device_count()`, then `batch(ds, devices)`: the
  # count the finding names is the file's name for it.
  path = INPUTS / "device_batched_pipeline.py"
  source = path.read_text().replace(
      "  return batch(ds, jax.local_device_count())",
      "  devices = jax.local_device_count()\n  return batch(ds, devices)")
  written = pipeline.rewrite_global_source(source, str(path))
  assert [f.text for f in written.findings
          if f.line == 44 and f.kind == Kind.CHANGED] == [
              "batch(..., devices) -> each batch it stacks [devices, "
              "per_device, ...] merged to [devices * per_device, ...] (the "
              "same rows on each device) and placed with NamedSharding(mesh, "
              "P(\"devices\")) as it is read"]
  assert "      for _batch in batch(ds, devices))\n" in written.code


def test_a_map_of_shard_read_by_a_loop_places_each_batch_it_reads():
  # `map(common_utils.shard, it)`: the generator written in its stead
  # places the very `_batch` it reads from `it`.
  source = GENERATOR.format(yields="yield batch").replace(
      "jax_utils.prefetch_to_device(batches(3), 2)",
      "map(common_utils.shard, batches(3))")
  written = pipeline.rewrite_global_source(source, "gen.py")
  assert ("  for batch in (\n"
          "      jax.make_array_from_process_local_data(\n"
          "          jax.NamedSharding(mesh, jax.P(\"i\")), _batch)\n"
          "      for _batch in batches(3)):\n") in written.code


def test_a_prefetch_of_a_stacking_call_places_its_batches_once():
  # `prefetch_to_device(batch(ds, jax.local_device_count()), 2)`: the
  # stacking call is written as a generator of global batches, recorded
  # so that the prefetch around it goes rather than placing them again.
  path = INPUTS / "device_batched_pipeline.py"
  source = path.read_text().replace(
      "  for step, batch in zip(range(steps), input_pipeline(0)):\n"
      "    params, opt_state, loss = p_train_step(params, opt_state, batch)\n"
      "    print(f\"step {step} loss",
      "  for b in jax_utils.prefetch_to_device(\n"
      "      batch(batch(examples(0), PER_DEVICE), "
      "jax.local_device_count()), 2):\n"
      "    params, opt_state, loss = p_train_step(params, opt_state, b)\n"
      "    print(f\"loss")
  written = pipeline.rewrite_global_source(source, str(path))
  assert [f.text for f in written.findings if f.line == 71] == [
      "jax_utils.prefetch_to_device(...) of global batches -> the batches "
      "themselves: flax's prefetch_to_device would stack their rows again "
      "onto this process's devices"]
  assert ("  for b in (\n"
          "      jax.make_array_from_process_local_data(batch_sharding,\n"
          "          jax.tree.map(lambda _x: _x.reshape((-1,) + "
          "_x.shape[2:]), _batch))\n"
          "      for _batch in batch(batch(examples(0), PER_DEVICE), "
          "jax.local_device_count())):\n") in written.code


def test_a_dropped_prefetch_of_a_named_iterator_is_said_in_full():
  source = GENERATOR.format(yields="yield common_utils.shard(batch)").replace(
      "  for batch in jax_utils.prefetch_to_device(batches(3), 2):",
      "  it = batches(3)\n  for batch in jax_utils.prefetch_to_device(it, 2):")
  written = pipeline.rewrite_global_source(source, "gen.py")
  assert [f.text for f in written.findings if f.line == 24] == [
      "jax_utils.prefetch_to_device(it, n) of global batches -> the "
      "iterator itself: flax's prefetch_to_device would stack their rows "
      "again onto this process's devices"]
  assert "  it = batches(3)\n  for batch in it:\n" in written.code
