"""`--global` of programs whose batches come from the team's own pipeline.

Three programs of tests/rewrite_inputs (issue 74): a many-host program fed
by a generator through `flax.jax_utils.prefetch_to_device` (each batch
`common_utils.shard`ed where it is yielded), a generator that stacks numpy
rows `[devices, 16, 8]` itself, and a numpy pipeline that batches per
device and then by `jax.local_device_count()` (tf.data's chain; tensorflow
is not installed here). Each is rewritten with `--global`: no helper of
ours, the batch placed as a global batch where it is made, and every
printed number equal to the original's on 8 emulated devices; the first
also in 2 processes x 4 devices. Each comparison fails on a plant that
changes a number (the negative controls).

To keep CI short, each layout runs as one job: every program of it in
turn, in one process (`_RUNNER`), originals first (a pmap under the mesh
the many-host rewrite sets would fail) and that rewrite last.
"""

import pathlib

import pytest

from bench.probes import rewrite_many_hosts
from compare import rewrite

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
GENERATOR, STACKED, BATCHED = ("multihost_generator", "stacked_batches",
                               "device_batched_pipeline")
# The plants: a number each changes. The stacked batch's x rows moved one
# device on (x and y no longer paired); the pipeline's last device's
# per-device batch dropped from each global batch.
PLANTS = {
    STACKED: ("x.reshape(-1, 8)", "np.roll(x.reshape(-1, 8), 16, axis=0)"),
    BATCHED: ("_x.reshape((-1,) + _x.shape[2:])",
              "_x[:-1].reshape((-1,) + _x.shape[2:])"),
}

@pytest.fixture(scope="module")
def written(tmp_path_factory):
  """Each program's `--global` rewrite, and the plants."""
  workdir = tmp_path_factory.mktemp("pipelines")
  paths = {}
  for name in (GENERATOR, STACKED, BATCHED):
    port = workdir / f"{name}_global.py"
    code = rewrite.main([str(INPUTS / f"{name}.py"), "-o", str(port),
                         "--global"])
    assert code == 0, name
    paths[name] = port
  for name, (right, wrong) in PLANTS.items():
    text = paths[name].read_text()
    assert text.count(right) == 1, (name, right)
    paths[f"{name}_plant"] = workdir / f"{name}_plant.py"
    paths[f"{name}_plant"].write_text(text.replace(right, wrong))
  text = paths[GENERATOR].read_text()
  assert text.count(rewrite_many_hosts.GLOBAL_MESH) == 1
  paths[f"{GENERATOR}_plant"] = workdir / f"{GENERATOR}_plant.py"
  paths[f"{GENERATOR}_plant"].write_text(text.replace(
      rewrite_many_hosts.GLOBAL_MESH, rewrite_many_hosts.LOCAL_MESH))
  return workdir, paths


def test_the_written_programs_place_batches_where_made(written):
  """No helper, no wait, no per-device view; each batch placed as a
  global batch where the pipeline makes it; prefetch_to_device dropped."""
  _, paths = written
  for name in (GENERATOR, STACKED, BATCHED):
    text = paths[name].read_text()
    assert "_pmap_" not in text and "block_until_ready" not in text, name
    assert "prefetch_to_device(" not in text and "a[0]" not in text, name
    assert "common_utils.shard(" not in text, name
  assert ("yield jax.make_array_from_process_local_data(jax.P(\"batch\"), "
          "batch)") in paths[GENERATOR].read_text()
  # The reshape's rows placed where the generator yields them, one a line.
  assert "\n".join([
      "    yield (jax.make_array_from_process_local_data(batch_sharding,",
      " " * 50 + "x.reshape(-1, 8)),",
      "           jax.make_array_from_process_local_data(batch_sharding,",
      " " * 50 + "y.reshape(-1, 4)))"]) in paths[STACKED].read_text()
  assert "for _batch in batch(ds, jax.local_device_count()))" in paths[
      BATCHED].read_text()


def test_every_number_equal_on_8_devices_and_each_plant_caught(written):
  # The generator-fed program runs on 8 devices in 2 x 4 (the next test):
  # its original is the slowest of the three, and CI's minutes are few.
  workdir, paths = written
  originals = [INPUTS / f"{n}.py" for n in (STACKED, BATCHED)]
  ports = [paths[k] for k in (STACKED, BATCHED, f"{STACKED}_plant",
                              f"{BATCHED}_plant")]
  (runs,) = rewrite_many_hosts.run_programs(workdir, originals + ports, 1, 8)
  for name in (STACKED, BATCHED):
    # Several lines of numbers each: the comparison is of something.
    assert len(runs[name].splitlines()) >= 4, runs[name]
    assert runs[f"{name}_global"] == runs[name], name
  for name in (STACKED, BATCHED):
    assert runs[f"{name}_plant"] != runs[name], name


def test_the_generator_fed_program_in_2_processes(written):
  """Both processes print the original's numbers; the rewrite with its
  mesh over one process's devices (each process averaging its own rows)
  does not."""
  workdir, paths = written
  runs = rewrite_many_hosts.run_programs(
      workdir, [INPUTS / f"{GENERATOR}.py", paths[GENERATOR],
                paths[f"{GENERATOR}_plant"]], 2, 4)
  assert len(runs) == 2
  assert runs[0][GENERATOR] == runs[1][GENERATOR]
  assert len(runs[0][GENERATOR].splitlines()) == 4
  for process in runs:
    assert process[f"{GENERATOR}_global"] == process[GENERATOR]
    assert process[f"{GENERATOR}_plant"] != process[GENERATOR]
