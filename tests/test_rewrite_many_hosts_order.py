"""The rewrite's order of the processes on the axis, pinned by behaviour.

pmap on many processes puts every process's devices on its axis, each
process's together and in process order. A step whose numbers do not depend
on that order (a pmean) cannot tell a port that orders them otherwise: this
program's step does what flax's imagenet and vision_transformer steps do
with `lax.axis_index`, a dropout key folded with it, and also `psum`s each
device's count of kept examples and `all_gather`s each device's loss
(tests/rewrite_inputs/multihost_axis_index.py). Both steps of the rewrite
must print what it prints, bitwise, on every process, in 2 processes x 4
emulated devices. A rewrite that puts the processes in another order (the
first step's `_pmap_mesh` or `--global`'s mesh with
`key=lambda d: -d.process_index`) draws other masks on every device and
gathers the losses in another order: this test fails on it. The program
and its two rewrites run in one 2-process job.

A file that does not join `jax.distributed` runs on many processes only
under the prover's launcher: `--global`'s mesh for such a file
(`global_written`) is pinned by proving the rewrite of a tutorial whose
step folds `lax.axis_index` into its noise key
(tests/rewrite_inputs/tutorial_axis_index.py) in 2 x 4; the same mesh with
the processes reversed fails that proof.
"""

import subprocess
import sys


from bench.probes import rewrite_many_hosts
from shardport.launch import launcher

PROGRAM = rewrite_many_hosts.INPUTS / "multihost_axis_index.py"


def test_each_step_of_the_rewrite_keeps_pmaps_device_order(tmp_path):
  # The program and both steps' rewrites in one job: one start-up and one
  # join (three jobs took about 40 s of CI's 2 cores).
  ports = [rewrite_many_hosts.rewritten(PROGRAM, tmp_path, variant)
           for variant in ("first step", "--global")]
  assert len({port.stem for port in ports}) == 2, ports
  runs = rewrite_many_hosts.run_programs(tmp_path, [PROGRAM, *ports], 2, 4)
  original = [process[PROGRAM.stem] for process in runs]
  # 3 steps' lines and the learned parameters, the same on both processes,
  # with 8 devices' losses on each step's line: something to compare.
  assert len(set(original)) == 1, original
  assert len(original[0].splitlines()) == 4, original
  assert original[0].splitlines()[0].count(",") == 7, original
  for port in ports:
    assert [process[port.stem] for process in runs] == original, port


AXIS_INDEX = "tests/rewrite_inputs/tutorial_axis_index.py"
AXIS_PORT = ("--global", "--prove",
             "tests.rewrite_inputs.rewrite_ports:axis_index_port")


def test_global_mesh_of_a_file_that_does_not_join_keeps_the_order(
    tmp_path, capfd):
  port = tmp_path / "port.py"
  done = subprocess.run(
      [sys.executable, "-m", "compare.rewrite", AXIS_INDEX, "-o", str(port),
       *AXIS_PORT, "--processes", "2", "--devices", "4"],
      capture_output=True, text=True, check=False, timeout=600)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.count("verdict: pass") == 1, done.stdout[-2000:]
  mesh = "sorted(jax.devices(), key=lambda d: d.process_index)"
  assert mesh in port.read_text()
  planted = tmp_path / "planted.py"
  planted.write_text(port.read_text().replace(
      mesh, "sorted(jax.devices(), key=lambda d: -d.process_index)"))
  # The launched job proves the file at -o as written (the planted one).
  code = launcher.launch(prog="compare.rewrite", module="compare.rewrite",
                         argv=[AXIS_INDEX, "-o", str(planted), *AXIS_PORT],
                         processes=2, devices=4)
  out = capfd.readouterr()
  assert code != 0 and "verdict: pass" not in out.out, out.out[-2000:]
  assert "incompatible devices" in " ".join((out.out + out.err).split())

