"""The verdict: negative controls fail, blow-ups are their own outcome, digests
are reproducible, and every strategy runs from the command line.

Runs are short (a few steps, small batches, one timing window) so that the
whole file stays within CI's budget; the long-run results (300 and 1000
steps) are in docs/measured/verdicts.json (bench/verdict_runs.py).
"""

import json

import numpy as np
import pytest

from compare import cli
from compare import runner
from compare import strategies
from compare import verdicts

SHORT = {"data_parallel": ["--steps", "3", "--batch-size", "64"],
         "accumulation": ["--steps", "3", "--batch-size", "64"],
         "ensemble": ["--steps", "2", "--batch-size", "32"]}


def _run(tmp_path, strategy, *extra):
  path = tmp_path / f"{strategy}.json"
  code = cli.main(["--strategy", strategy, *SHORT[strategy], "--windows",
                   "1", "--json", str(path), *extra])
  return code, json.loads(path.read_text())


@pytest.mark.parametrize("strategy", list(strategies.STRATEGIES))
def test_every_strategy_passes_from_the_command_line(tmp_path, strategy):
  # The port's runs also resume pmap's step-1 checkpoint (--switch-at): a
  # handover that changed any bit would break the bitwise pairs below.
  code, report = _run(tmp_path, strategy, "--switch-at", "1")
  assert code == 0 and report["verdict"] == "pass"
  assert report["switch_at"] == 1
  assert (report["runs"]["pmap"]["state_digest"] ==
          report["runs"]["shard_map"]["state_digest"])
  # Bitwise pairs hold the same bits, so their digests are equal.
  runs = report["runs"]
  for v in report["equivalence"]:
    if v["at"] == "final":
      same = runs[v["a"]]["state_digest"] == runs[v["b"]]["state_digest"]
      assert same == (v["verdict"] == "bitwise"), v
  # Evaluation outputs agree across backends (not only the states).
  accuracies = {name: run["test_accuracy"] for name, run in runs.items()}
  assert len(set(accuracies.values())) == 1, accuracies


@pytest.mark.parametrize("strategy, control", [
    (name, control.name) for name, spec in strategies.STRATEGIES.items()
    for control in spec.negative_controls])
def test_negative_controls_exit_1(tmp_path, strategy, control):
  code, report = _run(tmp_path, strategy, "--negative-control", control)
  assert code == 1 and report["verdict"] == "fail", report["equivalence"]
  # The mistake is caught after the first step already.
  assert any(v["verdict"] == "differ" for v in report["equivalence"]
             if v["at"] == "first_step")


def test_same_command_twice_gives_the_same_numbers(tmp_path):
  _, first = _run(tmp_path, "data_parallel")
  _, second = _run(tmp_path, "data_parallel")
  for name, run in first["runs"].items():
    assert run["state_digest"] == second["runs"][name]["state_digest"]
    assert run["losses"] == second["runs"][name]["losses"]
  drop = lambda vs: [{k: v for k, v in x.items()} for x in vs]
  assert drop(first["equivalence"]) == drop(second["equivalence"])
  assert (first["calibration"]["drift_per_step"] ==
          second["calibration"]["drift_per_step"])
  # The band is the largest drift of every calibration run, step by step.
  samples = first["calibration"]["samples"]
  assert set(samples) == set(runner.CALIBRATIONS)
  curves = [s["drift_per_step"] for s in samples.values()]
  assert first["calibration"]["drift_per_step"] == [max(d) for d in
                                                    zip(*curves)]
  assert len({s["state_digest"] for s in samples.values()}) == len(samples)


def test_a_blow_up_exits_3_with_the_step_named(tmp_path, capsys):
  code, report = _run(tmp_path, "data_parallel", "--learning-rate", "1e9")
  assert code == 3
  assert report["verdict"] == "diverged" and report["diverged_at"] >= 1
  assert f"diverged at step {report['diverged_at']}" in capsys.readouterr().out
  # pmap and shard_map blew up into the same bits: still bitwise.
  pairs = {(v["a"], v["b"], v["at"]): v["verdict"]
           for v in report["equivalence"]}
  assert pairs[("pmap", "shard_map", "final")] == "bitwise"


@pytest.mark.parametrize("argv, message", [
    (["--learning-rate", "-1"], "--learning-rate must be a finite positive"),
    (["--learning-rate", "nan"], "--learning-rate must be a finite positive"),
    (["--momentum", "1.5"], "--momentum must be in [0, 1)"),
    (["--workload", "linreg", "--dataset", "digits"], "takes examples of"),
    (["--negative-control", "nope"], "unknown --negative-control"),
    (["--plot", "/nonexistent/dir/p.png"], "--plot /nonexistent"),
    (["--strategy", "ensemble", "--workload", "linreg"], "trains cnn"),
    (["--strategy", "ensemble", "--members", "12"], "multiple of the device"),
    (["--strategy", "accumulation", "--accum-steps", "3"],
     "does not split into 8 devices x 3"),
    (["--strategy", "accumulation", "--workload", "linreg", "--accum-loop",
      "multisteps"], "needs an optax optimiser"),
])
def test_bad_config_exits_2_in_one_line(argv, message, capsys):
  base = [] if "--strategy" in argv else ["--strategy", "data_parallel"]
  assert cli.main([*base, *argv]) == 2
  err = capsys.readouterr().err
  assert message in err and err.count("\n") == 1, err


def test_calibrated_check_fails_a_pair_above_the_band():
  strategy = strategies.get("data_parallel")
  host = {"params": {"w": np.ones(3, np.float32)}, "opt_state": ()}
  moved = {"params": {"w": np.full(3, 1.1, np.float32)}, "opt_state": ()}
  calibration = {"drift_per_step": [1e-3, 1e-3],
                 "summaries": [{"test_loss": 1.0, "test_accuracy": 0.9}]}
  summaries = {name: {"test_loss": 1.0, "test_accuracy": 0.9}
               for name in ("a", "b", "reference")}
  within = verdicts.final(strategy, [("a", "b")], {"a": moved, "b": host},
                          {"a~b": [1e-3, 2e-3]}, calibration, summaries, 100)
  assert within[0]["verdict"] == "close"
  # Negative control: the same pair drifting to 7x the band (in steps
  # smaller than a flip) fails.
  above = verdicts.final(strategy, [("a", "b")], {"a": moved, "b": host},
                         {"a~b": [2e-3, 7e-3]}, calibration, summaries, 100)
  assert above[0]["verdict"] == "differ"
  assert above[0]["calibration"]["worst_step"] == 2


def test_calibration_band_is_the_largest_drift_of_its_runs():
  curves = {"calibration": [1e-8, 4e-8, 1e-8],
            "calibration_batch": [2e-8, 1e-8, 1e-8],
            "calibration_seed1": [1e-8, 1e-8, 9e-8]}
  calibrations = [runner.Run(name, None, "reference", permute=permute,
                             summary={"test_loss": 1.0 + i,
                                      "test_accuracy": 0.5},
                             host={"params": {"w": np.full(2, i, np.float32)}})
                  for i, (name, permute) in enumerate(
                      runner.CALIBRATIONS.items())]
  drift = {f"reference~{name}": curve for name, curve in curves.items()}
  report = runner._calibration_report(calibrations, drift)  # pylint: disable=protected-access
  assert report["drift_per_step"] == [2e-8, 4e-8, 9e-8]
  assert [s["test_loss"] for s in report["summaries"]] == [1.0, 2.0, 3.0]
  assert "across the whole batch" in (
      report["samples"]["calibration_batch"]["perturbation"])
  assert not drift  # every calibration curve moved into the report


@pytest.mark.parametrize("drift, test_loss, verdict, flip_step", [
    # Within the band, then 80x in one step (a ReLU that flipped in one
    # run only): the state comparison ends there; the metrics agree.
    ([1e-7, 1e-7, 8e-6, 3e-5, 3e-5], 1.0, "close", 3),
    # The same flip with test metrics apart: the metrics judge, and fail.
    ([1e-7, 1e-7, 8e-6, 3e-5, 3e-5], 1.5, "differ", 3),
    # A jump from within the band far beyond what a flip moves (a state
    # changed by 0.1% at once, as a wrong restore does): not a flip.
    ([1e-7, 1e-7, 1e-3, 1e-3, 1e-3], 1.0, "differ", None),
    # Out of the band before the jump (a wrong port from the start): the
    # jump excuses nothing.
    ([1e-5, 2e-5, 8e-4, 3e-3, 3e-3], 1.0, "differ", None),
    # Leaving the band (the noise floor here) 3x a step, slower than a
    # flip: fails.
    ([1e-7, 3e-7, 9e-7, 2.7e-6, 8.1e-6], 1.0, "differ", None),
])
def test_a_flip_ends_the_state_comparison(drift, test_loss, verdict,
                                          flip_step):
  strategy = strategies.get("data_parallel")
  host = {"params": {"w": np.ones(3, np.float32)}, "opt_state": ()}
  moved = {"params": {"w": np.full(3, 1.001, np.float32)}, "opt_state": ()}
  summaries = {"reference": {"test_loss": 1.0, "test_accuracy": 0.9},
               "a": {"test_loss": test_loss, "test_accuracy": 0.9},
               "b": {"test_loss": 1.0, "test_accuracy": 0.9}}
  calibration = {"drift_per_step": [1e-7] * 5, "summaries": [
      {"test_loss": 1.0, "test_accuracy": 0.9}]}
  result = verdicts.final(strategy, [("a", "b")], {"a": moved, "b": host},
                          {"a~b": drift}, calibration, summaries, 100)[0]
  assert result["verdict"] == verdict
  assert result["calibration"]["flip_step"] == flip_step


def test_metric_spread_is_the_widest_calibration_runs():
  strategy = strategies.get("data_parallel")
  host = {"params": {"w": np.ones(3, np.float32)}, "opt_state": ()}
  moved = {"params": {"w": np.full(3, 1.001, np.float32)}, "opt_state": ()}
  summaries = {"reference": {"test_loss": 1.0, "test_accuracy": 0.9},
               "a": {"test_loss": 1.2, "test_accuracy": 0.9},
               "b": {"test_loss": 1.0, "test_accuracy": 0.9}}

  def verdict(*losses):
    calibration = {"drift_per_step": [1e-2], "summaries": [
        {"test_loss": loss, "test_accuracy": 0.9} for loss in losses]}
    return verdicts.final(strategy, [("a", "b")], {"a": moved, "b": host},
                          {"a~b": [1e-3]}, calibration, summaries, 100)[0]

  # A test-loss gap of 0.2: within 3x of one calibration run's 0.1 spread,
  # whichever run it is; beyond 3x of the 1% floor when none moved.
  assert verdict(1.0, 1.1, 1.0)["verdict"] == "close"
  assert verdict(1.1, 1.0, 1.0)["verdict"] == "close"
  assert verdict(1.0, 1.0, 1.0)["verdict"] == "differ"


def test_sweep_devices_reports_every_count(tmp_path):
  path, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
  code = cli.main(["--strategy", "data_parallel", "--steps", "1",
                   "--batch-size", "64", "--windows", "1", "--sweep-devices",
                   "1,2", "--json", str(path), "--plot", str(png)])
  report = json.loads(path.read_text())
  assert code == 0 and [p["devices"] for p in report["sweep"]] == [1, 2]
  assert png.stat().st_size > 0
  # One device holds the whole batch; two all-reduce the same gradients.
  runs = {p["devices"]: p["runs"]["shard_map"] for p in report["sweep"]}
  assert runs[2]["all_reduce_bytes"] > 0 and runs[2]["examples_per_s"] > 0


@pytest.mark.parametrize("value", ["1,x", "0,2", "4,16"])
def test_bad_sweep_exits_2(value, capsys):
  assert cli.main(["--strategy", "data_parallel", "--sweep-devices",
                   value]) == 2
  assert capsys.readouterr().err.count("\n") == 1


def test_switch_at_catches_a_wrong_restore(tmp_path, monkeypatch):
  from training import handover  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  resume_into = handover.resume_into

  def nudged(*args, **kwargs):
    state, step = resume_into(*args, **kwargs)
    return state.replace(params=jax.tree.map(lambda p: p * 1.001,
                                             state.params)), step

  monkeypatch.setattr(handover, "resume_into", nudged)
  code, report = _run(tmp_path, "data_parallel", "--switch-at", "1")
  assert code == 1
  pairs = {(v["a"], v["b"], v["at"]): v["verdict"]
           for v in report["equivalence"]}
  assert pairs[("pmap", "shard_map", "final")] == "differ"
