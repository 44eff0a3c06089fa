"""`python -m compare --program`, the pytest plugin, and the calibration's
nudges: what `tests/test_prove.py` (public API only) cannot reach."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from compare._src import cli
from shardport.strategies import perturbations

pytest_plugins = ("pytester",)
TOY = "tests.toy_ports"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_program_runs_from_the_command_line(tmp_path, capsys):
  path = tmp_path / "report.json"
  assert cli.main(["--program", f"{TOY}:port", "--steps", "4", "--windows",
                   "1", "--json", str(path)]) == 0
  captured = capsys.readouterr()
  out = captured.out
  # The verdict first, then one line per pair, within 100 columns.
  assert out.startswith("VERDICT: pass\n  port vs pmap ")
  assert all(len(line) <= 100 for line in out.splitlines()[:24])
  assert "\ntoy / team program on its own batches" in out
  assert out.rstrip().endswith("verdict: pass (5 of 5 leaves judged)")
  assert json.loads(path.read_text())["steps"] == 4
  # Progress on stderr, a line per phase, each stamped with its seconds.
  phases = captured.err.splitlines()
  assert any("compiling port" in line for line in phases), phases
  assert all(line.startswith("[") for line in phases), phases


def test_quiet_prints_no_progress(capsys):
  assert cli.main(["--program", f"{TOY}:port", "--steps", "2", "--windows",
                   "1", "--quiet"]) == 0
  captured = capsys.readouterr()
  assert "VERDICT: pass" in captured.out and captured.err == ""


def test_a_planted_control_exits_1(capsys):
  assert cli.main(["--program", f"{TOY}:port", "--steps", "6", "--windows",
                   "1", "--negative-control", "update-1pct-at:3"]) == 1
  out = capsys.readouterr().out
  assert "verdict: fail, first at step 3: port vs pmap" in out
  # The summary says so first, on the failing pair's line.
  assert out.startswith("VERDICT: fail, first at step 3")
  pair = next(line for line in out.splitlines()
              if line.startswith("  port vs pmap "))
  assert "DIFFERS at the lockstep check, step 3" in pair, pair


@pytest.mark.parametrize("argv,words", [
    (["--program", "nosuch.module:port"], "cannot import nosuch.module"),
    (["--program", f"{TOY}"], "--program takes PKG.MODULE:NAME"),
    (["--program", f"{TOY}:nothing"], f"{TOY} has no nothing"),
    (["--program", f"{TOY}:ROWS"], "ROWS is a int, not a compare.Port"),
    (["--program", f"{TOY}:wrong_tree"], "port_step's state has no leaf"),
    (["--program", f"{TOY}:wrong_split"], "60 rows do not split"),
    (["--program", f"{TOY}:wrong_callable"], "port_step is not callable"),
    (["--program", f"{TOY}:wrong_reference"],
     "reference_step's state has no leaf"),
    (["--program", f"{TOY}:port", "--workload", "cnn"],
     "--program does not go with --workload"),
    (["--program", f"{TOY}:port", "--strategy", "ensemble"],
     "--program does not go with --strategy"),
    (["--program", f"{TOY}:port", "--negative-control", "no-pmean"],
     "unknown --negative-control 'no-pmean' for toy"),
    (["--program", f"{TOY}:port", "--negative-control", "update-1pct-at:99"],
     "step 99 is past the last step (12)"),
    (["--program", f"{TOY}:port", "--devices", "4096"],
     "--devices 4096: the program's mesh has 8 devices"),
    (["--program", f"{TOY}:init_raises"],
     "init raised RuntimeError: the team's code broke"),
    (["--program", f"{TOY}:batches_raise"],
     "batches raised RuntimeError: the team's code broke"),
    (["--program", f"{TOY}:evaluate_raises"],
     "evaluate raised RuntimeError: the team's code broke"),
    (["--program", f"{TOY}:factory_raises"],
     "factory_raises() raised RuntimeError: the team's code broke"),
])
def test_a_plugging_mistake_exits_2_with_one_line(capsys, argv, words):
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert words in err and err.count("\n") == 1 and err.startswith("compare:")


def test_the_traceback_of_the_teams_code_is_behind_a_flag(capsys):
  assert cli.main(["--program", f"{TOY}:init_raises", "--traceback"]) == 2
  err = capsys.readouterr().err
  assert "Traceback (most recent call last)" in err and "_raises" in err
  assert err.splitlines()[-1].startswith("compare: error: init raised")


def test_the_devices_the_mesh_has_are_accepted(capsys):
  assert cli.main(["--program", f"{TOY}:port", "--devices", "8", "--steps",
                   "2", "--windows", "0"]) == 0
  assert "verdict: pass" in capsys.readouterr().out


def test_the_plugin_emulates_the_devices_the_ini_asks_for(pytester,
                                                          monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  pytester.makeini("[pytest]\nshardport_devices = 4\n")
  pytester.makepyfile(test_devices=textwrap.dedent("""
      import jax

      def test_four():
        assert jax.device_count() == 4
  """))
  pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(
      passed=1)


def test_the_plugin_fails_the_session_when_jax_started_otherwise(
    pytester, monkeypatch):
  # The count is already set elsewhere (as by a conftest that ran first):
  # the plugin cannot change it and must say so rather than run on 2.
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
  pytester.makeini("[pytest]\nshardport_devices = 4\n")
  pytester.makepyfile(test_devices="def test_any():\n  pass\n")
  result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
  assert result.ret != 0
  result.stderr.fnmatch_lines(["*shardport_devices = 4 but jax sees 2*"])


def test_a_nudge_moves_every_float_one_ulp_and_copies_alike():
  x = np.array([1.0, -2.5, 0.0, 3e-8, 1.0], np.float32)
  moved = perturbations.nudged(x, seed=3)
  assert np.all(np.abs(moved.view(np.int32) - x.view(np.int32)) <= 1)
  assert np.all(moved != x)
  assert moved[0] == moved[4]  # equal values move alike
  ints = np.arange(3, dtype=np.int32)
  assert perturbations.nudged(ints, 3) is ints or np.array_equal(
      perturbations.nudged(ints, 3), ints)


def test_a_batch_without_floats_is_calibrated_by_nudging_the_state():
  assert perturbations.has_floats({"x": np.zeros(2, np.float32)})
  assert not perturbations.has_floats({"tokens": np.zeros(2, np.int32)})
  batch = {"tokens": np.arange(4, dtype=np.int32)}
  assert perturbations.StateNudge(1).batch(batch, 0, 8) is batch
  nudged = perturbations.BatchNudge(1).batch(
      {"x": np.ones(4, np.float32)}, 0, 8)
  assert not np.array_equal(nudged["x"], np.ones(4, np.float32))


def _region(path, tag):
  lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
  start = lines.index(f"# region: {tag}")
  return lines[start + 1:lines.index("# endregion", start)]


def test_the_example_plugs_in_with_30_lines_or_fewer():
  region = _region("examples/resnet/prove.py", "prove-your-port")
  assert 10 < len(region) <= 30, len(region)


def test_the_readme_example_runs_on_8_devices_as_printed():
  # In a fresh process with no device count of ours: the snippet's own
  # line emulates them (a 1-device mesh is refused).
  readme = (ROOT / "README.md").read_text(encoding="utf-8")
  block = next(b for b in readme.split("```python\n")[1:]
               if "compare.Port(" in b).split("```")[0]
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  done = subprocess.run(
      [sys.executable, "-c", block.replace(
          "compare.prove(port)", "compare.prove(port, steps=3, windows=0)")],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
      check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert "8 cpu devices" in done.stdout and "verdict: pass" in done.stdout


def test_a_dtype_alone_is_a_tree_difference_naming_it():
  from compare._src.prove import port_steps  # pylint: disable=g-import-not-at-top
  same = {"w": np.zeros(3, np.float32)}
  half = {"w": np.zeros(3, np.float16)}
  assert port_steps.tree_difference(same, same, "got", "want") is None
  assert port_steps.tree_difference(half, same, "port_step's state",
                              "pmap_step's") == (
      "port_step's state differs at ['w']: float16[3] where pmap_step's "
      "has float32[3]")


def test_pmaps_metrics_are_the_mean_over_its_devices():
  # Per-device values 1..8 read back as their mean, 4.5: not device 0's.
  from compare._src.prove import port_runs  # pylint: disable=g-import-not-at-top
  run = port_runs.PmapRun(None, None, None)
  metrics = run.metrics_to_host({"loss": np.arange(1, 9, dtype=np.float32),
                                 "lr": np.full(8, 0.1, np.float32)})
  assert metrics["loss"] == 4.5
  assert metrics["lr"] == pytest.approx(0.1)


def test_a_pytree_error_keeps_its_key_path_on_its_one_line():
  import jax  # pylint: disable=g-import-not-at-top
  from compare._src.prove import port_steps  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError) as raised:
    jax.tree.map(lambda a, b: a, {"opt_state": (1.0,)}, {"opt_state": [1.0]})
  line = port_steps.one_line(raised.value)
  assert "\n" not in line
  assert line.startswith("ValueError: pytree structure error: different "
                         "types at key path")
  assert "['opt_state']" in line, line
