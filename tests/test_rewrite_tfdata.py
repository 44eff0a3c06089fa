"""`--global` of a program whose tf.data pipeline batches per device.

tests/rewrite_inputs/tfdata_device_batched.py batches this process's shard
of a `tf.data.Dataset` per device and then by `jax.local_device_count()`,
and prefetches the numpy batches to the devices, as flax's imagenet family
does (issue 74). CI has no tensorflow: the file is rewritten, not run (it
is run, original and rewrite bitwise in 1 x 8 and 2 x 4, by
bench/real_programs/tfdata_global.py: docs/measured/rewrite_tfdata.json).
The written text must hold no helper of ours and no wait, no pmap idiom,
and place each batch as a global batch where it becomes jax's: the
prefetch of stacked batches written as a generator that merges each
batch's two leading axes (the same rows on each device) and places them.
The check fails on the original and on two plants (the negative controls).
"""

import pathlib

from compare import rewrite

PROGRAM = (pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
           / "tfdata_device_batched.py")
# The prefetch of stacked batches, as `--global` writes it: each batch's
# rows `[devices * per_device, ...]` placed over every process's devices.
PLACED = "\n".join([
    "  it = (",
    "      jax.make_array_from_process_local_data(jax.P(\"batch\"),",
    "          jax.tree.map(lambda _x: _x.reshape((-1,) + _x.shape[2:]), "
    "_batch))",
    "      for _batch in it)"])
LEFT = ("_pmap_", "block_until_ready", "jax.pmap(", "prefetch_to_device(",
        "replicate(", "jax.local_devices()")


def problems(text: str) -> list[str]:
  """What the written program must not hold, or must and does not."""
  found = [f"{left} left" for left in LEFT if left in text]
  if text.count(PLACED) != 1:
    found.append("the batch not placed where the prefetch made it")
  # tf.data still batches per device and then by the device count: the
  # merge is of its batches, not of a pipeline of another shape.
  if text.count(
      "ds = ds.batch(jax.local_device_count(), drop_remainder=True)") != 1:
    found.append("the pipeline's batch by the device count changed")
  if "sorted(jax.devices(), key=lambda d: d.process_index)" not in text:
    found.append("the mesh not over every process's devices")
  return found


def test_the_tfdata_pipeline_is_placed_where_its_batches_become_jaxs(
    tmp_path, capsys):
  port = tmp_path / "tfdata_global.py"
  assert rewrite.main([str(PROGRAM), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "0 place(s) need a person" in out, out
  text = port.read_text()
  assert problems(text) == [], problems(text)
  # The negative controls: the original, a prefetch kept, the merge gone.
  assert len(problems(PROGRAM.read_text())) >= 3
  kept = text.replace("  it = (\n", "  it = jax_utils.prefetch_to_device(\n")
  assert problems(kept) == ["prefetch_to_device( left",
                            "the batch not placed where the prefetch made it"]
  unmerged = text.replace("_x.reshape((-1,) + _x.shape[2:])", "_x")
  assert problems(unmerged) == [
      "the batch not placed where the prefetch made it"]
