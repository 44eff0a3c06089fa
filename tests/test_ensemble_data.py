"""ensemble_data: the ports agree with the reference member by member, the
nested pmap is skipped with its error where jax refuses it, the wrong-axis
control fails and bad input is refused in one line.

Runs are one step of 32 examples, cached per configuration, so the file
stays well under a minute on two cores; the long run is the CLI's. In the
original-runtime environment (jax 0.9.2, JAX_PMAP_SHMAP_MERGE=0) the nested
pmap runs, and must equal the shard_map port bitwise.
"""

import dataclasses

import pytest

from compare._src import cli
from shardport import strategies
from legacy_pmap import devices as legacy_devices
from sharded import devices
from sharded import train as sharded_train
from tests import helpers
from shardport.workloads import configs

STRATEGY = strategies.get("ensemble_data")
RUNS = {run.name: run for run in STRATEGY.runs}
legacy, port = RUNS["pmap"].module, RUNS["shard_map"].module
CONFIG = configs.EnsembleDataConfig(members=2, global_batch=32, steps=1,
                                    input_shape=(8, 8, 1))
# After one step the ports differ from the reference only in the order each
# member's gradient is summed (the mean of D slice means against one mean
# over the batch; the jit port also batches the members' convolutions):
# measured at most 4.3e-7 of a leaf's largest value, 1, 2, 4 and 8 members
# on 8 devices. 1e-5 is the strategy's own first-step tolerance; the
# wrong-axis mistake moves some leaf by 2.1 of its largest value.
TOLERANCE = helpers.leaf_scaled(STRATEGY.tolerances["first_step"].atol)
# The nested pmap's error on jax 0.10: pmap is jit over shard_map there.
NESTED_PMAP_ERROR = "should match the mesh passed to shard_map"

_RUNS = {}


def _run(name, config, data, module=None):
  """`helpers.run` of run `name` on 8 devices, states kept; made once per
  run and config (`module` replaces the run's own, uncached)."""
  spec = RUNS[name]
  if module is not None:
    return helpers.run(module, spec.variant, config, data, 8,
                       keep_states=True)
  if (name, config) not in _RUNS:
    _RUNS[name, config] = helpers.run(spec.module, spec.variant, config, data,
                                      8, keep_states=True)
  return _RUNS[name, config]


def _reference(members, data):
  """The reference's first `members` members: member i of any ensemble size
  is member i of the 4-member one (tests/test_ensemble.py checks the keys),
  so one reference run serves every size here."""
  truth = _run("reference", dataclasses.replace(CONFIG, members=4), data)
  return [helpers.member(state, slice(0, members)) for state in truth.states]


@pytest.mark.parametrize("members", [2, 4])
@pytest.mark.parametrize("name", ["shard_map", "jit"])
def test_ports_agree_with_reference_per_member(digits, name, members):
  config = dataclasses.replace(CONFIG, members=members)
  ported = _run(name, config, digits)
  truth = _reference(members, digits)
  helpers.assert_bitwise(ported.states[0], truth[0])  # the same init
  helpers.assert_close(ported.states[1], truth[1], TOLERANCE, members=True)
  # The metrics too: each member's loss, and the ensemble's accuracy.
  first = _run("reference", dataclasses.replace(CONFIG, members=members),
               digits).metrics[0]
  helpers.assert_close(ported.metrics[0], first, TOLERANCE, dtypes=False)


@pytest.mark.jax010
def test_pmap_is_skipped_quoting_the_nested_pmap_error():
  assert STRATEGY.active_runs(CONFIG, 8) == ("shard_map", "jit", "reference")
  why = STRATEGY.why_skipped(CONFIG, 8)
  assert why.startswith("nested pmap fails on jax "), why
  assert NESTED_PMAP_ERROR in why and "\n" not in why, why
  assert why == legacy.why_unavailable()


@pytest.mark.jax010
def test_training_the_nested_pmap_where_it_fails_exits_2(tmp_path, capsys):
  from legacy_pmap import train  # pylint: disable=g-import-not-at-top
  assert train.main(["--strategy", "ensemble_data", "--steps", "1",
                     "--workdir", str(tmp_path / "w")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and NESTED_PMAP_ERROR in err, err
  assert err.startswith("train: error: legacy_pmap cannot run ensemble_data")


def test_nested_pmap_equals_shard_map_where_it_runs(digits):
  # The original runtime (CI's second environment): the same program, the
  # same collectives, one member's devices per row.
  if legacy.why_unavailable() is not None:
    pytest.skip(legacy.why_unavailable())
  assert "pmap" in STRATEGY.active_runs(CONFIG, 8)
  nested, ported = (_run(name, CONFIG, digits) for name in ("pmap",
                                                            "shard_map"))
  for a, b in zip(nested.states, ported.states):
    helpers.assert_bitwise(a, b)
  helpers.assert_bitwise(nested.metrics, ported.metrics)


def test_gradient_over_the_wrong_axis_is_caught(digits):
  control = STRATEGY.control("wrong-axis")
  planted = control.plant(port, "shard_map")
  wrong = _run("shard_map", CONFIG, digits, module=planted)
  truth = _reference(CONFIG.members, digits)
  helpers.assert_bitwise(wrong.states[0], truth[0])
  with pytest.raises(AssertionError, match="differs by"):
    helpers.assert_close(wrong.states[1], truth[1], TOLERANCE, members=True)


@pytest.mark.parametrize("argv, words", [
    (["--members", "3"], "--members 3 does not divide the 8 devices"),
    (["--members", "16"], "--members 16 does not fit 8 devices"),
    (["--members", "4", "--devices", "6"], "--members 4 does not divide the 6"),
    (["--batch-size", "30"], "--batch-size 30 does not split over the 4 data "
                             "devices of each member"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, words):
  code = cli.main(["--strategy", "ensemble_data", *argv, "--json",
                   str(tmp_path / "r.json")])
  err = capsys.readouterr().err
  assert code == 2 and err.count("\n") == 1, err
  assert err.startswith("compare: error: ") and words in err, err
  assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("options", [
    {"members": 8, "global_batch": 4}, {"members": 1, "global_batch": 8},
    {"members": 4, "global_batch": 30}])
def test_layouts_that_fit_are_taken(digits, options):
  # The checks' control: one member per device, one member on all of them,
  # and a batch that splits over D = 2 though not over the 8 devices.
  STRATEGY.validate(STRATEGY.make_config(options, digits), digits, 8)


def test_the_training_program_refuses_the_same_input(tmp_path, capsys):
  assert sharded_train.main(["--strategy", "ensemble_data", "--members", "3",
                             "--workdir", str(tmp_path / "w")]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--members 3 does not divide" in err, err


def test_a_mesh_that_does_not_fit_is_refused_where_it_is_made():
  placement = port.make_placement(8)
  with pytest.raises(configs.DeviceError, match="--members 9 does not fit"):
    devices.member_data_mesh(placement, 9)
  with pytest.raises(configs.EnsembleSizeError, match="--members 3"):
    port.create_state(0, dataclasses.replace(CONFIG, members=3), placement)
  mesh = devices.member_data_mesh(placement, 2)
  assert dict(mesh.shape) == {"members": 2, "data": 4}
  # Member m's row is devices 4m..4m+3, as the nested pmap lays them out.
  assert mesh.devices.tolist() == legacy_devices.member_data_mesh(
      list(placement.devices), 2).tolist()
