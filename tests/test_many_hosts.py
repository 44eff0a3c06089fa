"""Runs the guide's many-host recipes as CI's job: 2 processes x 4 devices.

`docs/many_hosts_main.py` holds the recipes the guide shows for many hosts
(docs/MIGRATION.md#many-hosts, docs/MANY-HOSTS.md): the mesh, a host's batch
placed into one global array, and the checkpoint that saves and restores the
whole state. Here it runs in one process of 8 emulated devices and in two of
4 joined by jax.distributed (gloo), and each recipe is checked where it can
fail: each process's rows differ and the global batch is their
concatenation; a job stopped after a checkpoint and started again ends with
the uninterrupted job's state digest. The quick path and the migration
guide's 5.1 show the same mesh and placement calls (checked on their text).
"""

import pathlib

import numpy as np

from docs import many_hosts_main
from docs.guide.sources import regions
from tests.two_processes import two_processes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _two_processes(logs, workdir, *args):
  """Runs the main in 2 processes of 4 devices; each one's printed lines."""
  return two_processes("docs.many_hosts_main", logs,
                       workdir.name + "-".join(args), "--workdir", workdir,
                       *args)


def _printed(lines, what):
  """The words after `what` on each line that starts with it."""
  return [line.split()[1:] for line in lines if line.startswith(what + " ")]


def _losses(lines):
  return {int(step): float(loss) for step, _, loss in _printed(lines, "step")}


def test_the_many_host_recipes_in_two_processes(tmp_path, capsys):
  many_hosts_main.main(str(tmp_path / "one"))  # 1 x 8, in this process
  one = _losses(capsys.readouterr().out.splitlines())
  job = tmp_path / "two"
  first, second = _two_processes(tmp_path, job)
  two, [[uninterrupted]] = _losses(first), _printed(first, "digest")
  assert not _printed(second, "step")  # process 0 alone prints
  assert list(two) == list(one) == [1, 2, 3, 4, 5]
  # gloo's ring sums in another order than one process's: close, not bitwise.
  np.testing.assert_allclose(list(two.values()), list(one.values()),
                             rtol=1e-6)

  # Stopped after step 3's checkpoint, as if it never reached step 5's:
  # started again, the job resumes at step 4 and ends where it would have.
  (job / "5").rename(tmp_path / "never-written")
  first, second = _two_processes(tmp_path, job, "--show-batch")
  resumed = _losses(first)
  assert list(resumed) == [4, 5]
  assert resumed == {step: two[step] for step in resumed}  # bitwise
  assert _printed(first, "digest") == [[uninterrupted]]

  # Each process placed its own rows, and the global batch is theirs, in
  # process order: batch 0 of the program, cut in two.
  x, y = many_hosts_main.data(0)
  halves = [(x[:32], y[:32]), (x[32:], y[32:])]
  rows = [_printed(out, "rows") for out in (first, second)]
  assert rows == [[["0", many_hosts_main.digest(halves[0])]],
                  [["1", many_hosts_main.digest(halves[1])]]]
  assert rows[0] != rows[1]
  assert _printed(first, "batch") == [[many_hosts_main.digest((x, y))]]


def test_the_guide_shows_one_mesh_and_one_placement():
  # One recipe for each: the quick path's mesh and batch placement, and the
  # placement the migration guide's 5.1 spells out, are the many-host
  # program's calls, which the test above runs in two processes.
  quick = regions(ROOT / "docs" / "quick_path.py")["quick-after"]
  shown = regions(ROOT / "docs" / "many_hosts_main.py")["many-hosts-place"]
  core = (ROOT / "docs" / "MIGRATION.template.md").read_text()
  norm = lambda text: "".join(text.split())
  mesh = ('jax.make_mesh((jax.device_count(),), ("data",), '
          "axis_types=(jax.sharding.AxisType.Auto,))")
  place = ('jax.make_array_from_process_local_data('
           'NamedSharding(mesh, P("data")), rows)')
  assert norm(mesh) in norm(quick) and norm(mesh) in norm(shown)
  assert norm(place) in norm(shown) and norm(place) in norm(core)
  assert "jax.make_array_from_process_local_data(" in quick
  assert "jax.device_put(batch" not in quick
