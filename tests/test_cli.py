"""`python -m compare`: the report, the exit codes, the one-line errors."""

import json
import os
import subprocess
import sys

import pytest

from compare._src import cli
from compare._src.prove import outcome
from compare._src.prove import judging
from shardport import strategies
from shardport.strategies import tolerances

# The CNN where rounding must differ; the linear regression (a quarter of
# the time) where the command line is checked, not the port.
SMALL_CNN = ["--strategy", "data_parallel", "--steps", "2", "--batch-size",
             "64", "--windows", "0"]
SMALL = SMALL_CNN + ["--workload", "linreg"]
KEYS = {"schema", "strategy", "workload", "dataset", "platform", "devices",
        "processes", "jax_version", "steps", "global_batch", "seed", "runs",
        "equivalence", "verdict"}
RUN_KEYS = {"examples_per_s", "examples_per_s_spread", "compile_s",
            "final_loss", "test_accuracy", "losses", "collectives", "memory"}


@pytest.mark.parametrize("workload", ["cnn", "linreg"])
def test_data_parallel_report(tmp_path, capsys, workload):
  path = tmp_path / "out.json"
  assert cli.main(SMALL + ["--workload", workload, "--json", str(path)]) == 0
  report = json.loads(path.read_text())
  assert KEYS <= set(report)
  assert set(report["runs"]) == {"pmap", "shard_map", "jit", "reference"}
  for run in report["runs"].values():
    assert RUN_KEYS <= set(run)
    assert len(run["losses"]) == 2
  pmap, mapped = report["runs"]["pmap"], report["runs"]["shard_map"]
  assert pmap["collectives"]["all-reduce"] == mapped["collectives"]["all-reduce"]
  pairs = {(v["a"], v["b"], v["at"]): v["verdict"]
           for v in report["equivalence"]}
  assert pairs[("pmap", "shard_map", "first_step")] == "bitwise"
  assert report["verdict"] == "pass"
  assert "verdict: pass" in capsys.readouterr().out


def test_a_differing_pair_exits_1(tmp_path, monkeypatch):
  # Negative control for the whole harness: no tolerance and no band at
  # all, and the single-device reference (other summation order) must then
  # differ, at step 1.
  strategy = strategies.get("data_parallel")
  monkeypatch.setattr(strategy, "tolerances", {
      "first_step": tolerances.Tolerance(0.0, 0.0),
      "final": tolerances.Tolerance(0.0, 0.0)})
  monkeypatch.setattr(judging, "LOCKSTEP_MULTIPLE", 0.0)
  path = tmp_path / "out.json"
  # The CNN: the linear regression's sums are too short to round apart.
  assert cli.main(SMALL_CNN + ["--json", str(path)]) == 1
  report = json.loads(path.read_text())
  assert report["verdict"] == "fail"
  assert report["first_failure"].startswith("first at step 1:")


def test_a_crash_leaves_no_json(tmp_path, monkeypatch, capsys):
  def boom(*args, **kwargs):
    raise RuntimeError("crash mid-run")
  monkeypatch.setattr(outcome, "compare", boom)
  path = tmp_path / "out.json"
  assert cli.main(SMALL + ["--json", str(path)]) == cli.EXIT_CRASH
  assert not path.exists() and not list(tmp_path.iterdir())
  # One line, the traceback only behind --traceback.
  err = capsys.readouterr().err
  assert "Traceback" not in err
  assert err.splitlines()[-1].startswith("compare: crashed: RuntimeError")
  assert cli.main(SMALL + ["--traceback"]) == cli.EXIT_CRASH
  assert "Traceback" in capsys.readouterr().err


def test_plot_beside_json_writes_both(tmp_path, capsys, monkeypatch):
  # --plot crashed on every run but the sweep's, after all the work, and
  # lost the JSON beside it.
  plot, path = tmp_path / "curves.png", tmp_path / "out.json"
  assert cli.main(SMALL + ["--plot", str(plot), "--json", str(path)]) == 0
  assert plot.read_bytes()[:4] == b"\x89PNG"
  assert json.loads(path.read_text())["verdict"] == "pass"
  # A plot that fails is a crash (exit 4), the measured JSON kept.
  from compare._src.prove import plots  # pylint: disable=g-import-not-at-top
  def broken(*args, **kwargs):
    raise RuntimeError("no display")
  monkeypatch.setattr(plots, "learning_curves", broken)
  path.unlink()
  capsys.readouterr()
  assert cli.main(SMALL + ["--plot", str(plot), "--json",
                           str(path)]) == cli.EXIT_CRASH
  assert json.loads(path.read_text())["verdict"] == "pass"
  err = capsys.readouterr().err
  assert ("compare: crashed: RuntimeError: no display (exit 4; --traceback "
          "shows where)") in err
  # Each run's progress once: a run before it in this process left none.
  assert err.count("loading the data and checking the options") == 1, err


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "100"], "does not divide over 8 devices"),
    (["--devices", "16"], "asked for 16 devices, 8 exist"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--workload", "resnet"], "unknown workload"),
    (["--dataset", "cifar"], "unknown dataset"),
    (["--json", "/nonexistent/dir/out.json"], "cannot write"),
    (["--strategy", "pipeline"], "invalid choice"),
    (["--show-diff", "pipeline"], "pipeline"),
])
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
  assert cli.main(["--strategy", "data_parallel", *argv]) == 2
  err = capsys.readouterr().err
  assert message in err and err.count("\n") == 1, err


def test_bad_input_from_a_fresh_process_is_quick_and_clean(tmp_path):
  env = {**os.environ, "PYTHONPATH": os.getcwd()}
  done = subprocess.run(
      [sys.executable, "-m", "compare", "--strategy", "data_parallel",
       "--batch-size", "100", "--json", str(tmp_path / "out.json")],
      capture_output=True, text=True, timeout=120, env=env, check=False)
  assert done.returncode == 2
  assert done.stderr.strip().splitlines() == [
      "compare: error: batch size 100 does not divide over 8 devices"]
  assert not (tmp_path / "out.json").exists()
