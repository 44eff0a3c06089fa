"""`compare --switch-at N` hands over pmap's state after exactly N steps.

The report's `switch` record says which step was handed over and the digest
of the state each port run restored; here both are checked against pmap's
own digest after N steps, computed apart from `compare` (tests/helpers.py),
at the first step, a middle one and the last but one, for every strategy.
Negative controls hand over one step early and one step late.

The runs are short (4 steps, one timing window) and share a persistent
compilation cache, so that only each strategy's first run compiles. The
data-parallel programs train linear512: it compiles in a third of the CNN's
time, and Adam's state (moments and count) is handed over with the params.
"""

import json

import pytest

from compare._src import cli
from compare._src.prove import runner
from shardport import strategies
from compare._src.prove import switch
from tests import compile_cache
from tests import helpers
from shardport.workloads import datasets
from shardport.workloads import digest
from shardport.workloads import registry

STEPS = 4
OPTIONS = {"data_parallel": {"workload": "linear512", "global_batch": 64},
           "accumulation": {"workload": "linear512", "global_batch": 64},
           "ensemble": {"workload": "cnn", "global_batch": 32},
           "ensemble_data": {"workload": "cnn", "global_batch": 32},
           "fsdp": {"workload": "linear512", "global_batch": 64}}


@pytest.fixture(scope="module", autouse=True)
def compile_once(tmp_path_factory):
  """A persistent compilation cache for this module's runs (the suite's
  where there is one), the one before it kept after it."""
  yield from compile_cache.module_cache(tmp_path_factory)


@pytest.fixture(scope="module")
def pmap_digests():
  """`strategy -> [digest after 0, 1, ..., STEPS - 1 steps]` of pmap alone."""
  digests = {}

  def get(name):
    if name not in digests:
      strategy = strategies.get(name)
      options = {"steps": STEPS, **OPTIONS[name]}
      data = datasets.load(registry.get(options["workload"]).dataset)
      config = strategy.make_config(options, data)
      spec = next(run for run in strategy.runs if run.name == switch.SOURCE)
      trained = helpers.run(
          spec.module, spec.variant, config, data, 8, STEPS - 1,
          calls=strategy.calls_per_step(config, spec.name), keep_states=True)
      digests[name] = [digest.state_digest(host) for host in trained.states]
    return digests[name]

  return get


def _switched(tmp_path, strategy, switch_at):
  path = tmp_path / f"{strategy}-{switch_at}.json"
  options = OPTIONS[strategy]
  code = cli.main(["--strategy", strategy, "--steps", str(STEPS),
                   "--workload", options["workload"], "--batch-size",
                   str(options["global_batch"]), "--windows", "0",
                   "--switch-at", str(switch_at), "--json", str(path)])
  return code, json.loads(path.read_text())


def _check_handover(report, step, expected):
  """Raises AssertionError unless the report's handover is step `step` and
  every port run restored the state whose digest is `expected`."""
  handed = report["switch"]
  assert handed["step"] == step and handed["source"] == switch.SOURCE
  assert handed["source_digest"] == expected, (
      f"pmap handed over another state than its own after {step} steps")
  ports = strategies.get(report["strategy"]).port_runs
  assert sorted(handed["restored"]) == sorted(
      name for name in ports if name in report["runs"])
  assert set(handed["restored"].values()) == {expected}


# The first and the last step a port can take over at (the middle one
# adds no path of its own); the classic ensemble at the last only (CI time:
# 29 s; its restore is the same at any step, and step 1 is every other
# strategy's).
@pytest.mark.parametrize("strategy, step", [
    (strategy, step) for strategy in strategies.STRATEGIES
    for step in (1, STEPS - 1) if (strategy, step) != ("ensemble", 1)])
def test_switch_hands_over_pmaps_state_after_exactly_n_steps(
    tmp_path, strategy, step, pmap_digests):
  spec, options = strategies.get(strategy), OPTIONS[strategy]
  config = spec.make_config({"steps": STEPS, **options}, datasets.load(
      registry.get(options["workload"]).dataset))
  if switch.SOURCE not in spec.active_runs(config, 8):
    pytest.skip(spec.why_skipped(config, 8))  # no pmap to switch from here
  code, report = _switched(tmp_path, strategy, step)
  assert report["switch_at"] == step
  _check_handover(report, step, pmap_digests(strategy)[step])
  assert code == 0 and report["verdict"] == "pass"


@pytest.mark.parametrize("shift", [-1, 1], ids=["early", "late"])
def test_a_handover_one_step_off_is_caught(tmp_path, monkeypatch, shift,
                                           pmap_digests):
  # The switch runs one step early (late) and calls what it hands over
  # step 2, as a switch moved to the top of the loop (or past its step)
  # would.
  step, real = STEPS // 2, switch.switch

  def off_by_one(strategy, config, runs, at):
    return {**real(strategy, config, runs, at), "step": at - shift}

  monkeypatch.setattr(runner.switch, "switch", off_by_one)
  _, report = _switched(tmp_path, "data_parallel", step + shift)
  assert report["switch"]["step"] == step
  with pytest.raises(AssertionError, match="another state"):
    _check_handover(report, step, pmap_digests("data_parallel")[step])
