"""What a proof holds: the programs' states and little more.

A census of the devices' live buffers (each counted once, however many
arrays view it) after every lockstep check of a proof of an AdamW MLP
(`bench.runners.prove_scale`, 0.5M parameters), in sets of the 8 devices' state:
pmap's stacked state and the port's replicated one are 2, the Port's
initial state on one device an eighth. Each memory source the prover once
held is planted back and must raise it: the lockstep's device copies of
every run's initial state, and the free-running calibration runs (now
asked for, `calibration_runs`). On the host (`bench.runners.prove_census`): the
shared state alone; the runs' states, their checked steps and the
calibration's are read from their devices leaf by leaf
(`host_copies.DeviceLeaf`), and each host copy removed is planted back.
A state read so keeps no host view of a device buffer: a donating step
still donates it. The census counts as each free-running step starts,
after each check and as each check measures its band.
"""

import types

import jax
import numpy as np
import pytest

import compare
from bench.runners import prove_census
from bench.runners import prove_scale
from compare._src.prove import equivalence
from compare._src.prove import host_copies
from compare._src.prove import lockstep
from compare._src.prove import proof as proof_module
from compare._src.prove import runner

# pmap's state and the port's (2.0 measured; the calibration's placed
# state and its step are gone by the count): under 2.5 sets; each plant
# adds at least one set.
MOST_SETS = 2.5


def _state_bytes(port):
  state = port.init()
  return sum(np.asarray(x).nbytes
             for x in jax.tree.leaves((state.params, state.opt_state)))


def _largest_census(monkeypatch, host=False, reference=False,
                    **prove_kwargs) -> float:
  """The most sets of the 8 devices' state alive at any census; with
  `host`, the most host copies of one device's state instead."""
  port = prove_scale.build_port("mlp", 0.5, 3, reference=reference)
  with prove_census.counted(monkeypatch.setattr, _state_bytes(port),
                            host) as seen:
    proof = compare.prove(port, windows=0, **prove_kwargs)
  assert proof.verdict == "pass", proof.table()
  # 3 steps: 2 boundaries each, and the band measured at the first
  # `CALIBRATED_FIRST` (every run bitwise after them), or at every step
  # (pmap and the one-device reference apart).
  assert len(seen) == 6 + (3 if reference else lockstep.CALIBRATED_FIRST)
  return max(count[1 if host else 0] for count in seen)


def test_a_proof_holds_the_two_programs_states_and_little_more(
    monkeypatch):
  assert _largest_census(monkeypatch) < MOST_SETS


def test_arrays_another_test_left_alive_are_not_the_proofs(monkeypatch):
  # Three sets of the state left on the devices before the proof (as an
  # earlier test in the same pytest-xdist worker can leave them): not
  # counted as the proof's.
  state_bytes = _state_bytes(prove_scale.build_port("mlp", 0.5, 3,
                                                      reference=False))
  left = [jax.device_put(np.ones(state_bytes // 4, np.float32), d)
          for d in jax.devices() for _ in range(3)]
  assert _largest_census(monkeypatch) < MOST_SETS
  del left


def test_initial_copies_planted_back_are_seen(monkeypatch):
  monkeypatch.setattr(lockstep, "skeleton",
                      lambda state: jax.tree.map(lambda x: x.copy(), state))
  assert _largest_census(monkeypatch) > MOST_SETS + 1


def test_a_shared_state_kept_through_the_free_steps_is_seen(monkeypatch):
  # The plant: the lockstep keeps a device copy of the truth's state
  # through the free-running steps, as it did before issue 57.
  before_step = lockstep.Lockstep.before_step

  def keeping(self, t, host_batch):
    before_step(self, t, host_batch)
    self.kept = jax.tree.map(lambda x: x.copy(), self.reference.state)

  monkeypatch.setattr(lockstep.Lockstep, "before_step", keeping)
  assert _largest_census(monkeypatch) > MOST_SETS + 0.5


def test_calibration_runs_are_asked_for_and_seen(monkeypatch):
  assert _largest_census(monkeypatch, calibration_runs=3) > MOST_SETS + 1


# On the host: the truth's state before the checked step (the shared
# state), 1.03 to 1.06 copies measured at every count (3.03 as the band was
# measured, before the states were read leaf by leaf); each plant below
# adds a copy.
MOST_HOST_COPIES = 1.5


@pytest.mark.parametrize("reference", [False, True])
def test_the_host_holds_the_shared_state_alone(monkeypatch, reference):
  # With a reference: 6.02 before (pmap's and the reference's states apart).
  assert _largest_census(monkeypatch, host=True,
                         reference=reference) < MOST_HOST_COPIES


@pytest.mark.parametrize("plant", ["first_steps", "before", "fetched"])
def test_host_copies_planted_back_are_seen(monkeypatch, plant):
  """Each host copy issue 57 removed, kept again: every run's first step
  to the end, every run's state before a step through it, the states
  fetched whole (`to_host`) where they were read leaf by leaf."""
  if plant == "first_steps":
    fetched = runner._step  # pylint: disable=protected-access

    def keeping(run, *args):
      finite = fetched(run, *args)
      if not hasattr(run, "kept"):
        run.kept = jax.tree.map(np.copy, run.host)
      return finite
    monkeypatch.setattr(runner, "_step", keeping)
  elif plant == "before":
    before_step = lockstep.Lockstep.before_step

    def keeping_before(self, t, host_batch):
      before_step(self, t, host_batch)
      self.kept = [jax.tree.map(np.copy, run.host)
                   for run in self.runs.values()]
    monkeypatch.setattr(lockstep.Lockstep, "before_step", keeping_before)
  else:
    monkeypatch.setattr(host_copies, "of",
                        lambda module, state: module.to_host(state))
  assert _largest_census(monkeypatch, host=True) > MOST_HOST_COPIES


@pytest.mark.parametrize("run", ["pmap", "port"])
def test_a_state_read_on_its_devices_is_to_host_and_lets_the_step_donate(
    run):
  """`host_copies.of` a Port's state: bitwise its `to_host`, every array
  leaf left on a device, and the run's donating step still donates its
  buffers (a read after it raises, never a stale value)."""
  port = prove_scale.build_port("mlp", 0.5, 3, reference=False)
  strategy, config = proof_module.prepare(port)
  module = next(r.module for r in strategy.runs if r.name == run)
  placement = module.make_placement(8)
  state = module.create_state(0, config, placement)
  read = host_copies.of(module, state)
  assert all(isinstance(leaf, host_copies.DeviceLeaf)
             for leaf in jax.tree.leaves(read["params"]))
  assert equivalence.trees_same_bits(read, module.to_host(state))
  step = module.make_train_step(config, placement, run)
  batch = module.put_batch(port.batches(0), placement)
  step(state, batch)
  assert all(leaf.is_deleted() for leaf in jax.tree.leaves(state.params))
  leaf = jax.tree.leaves(read["params"])[0]
  with pytest.raises(RuntimeError, match="deleted"):
    np.asarray(leaf)


@pytest.mark.parametrize("run", ["pmap", "port"])
def test_a_host_state_is_a_copy_not_a_view_of_a_device_buffer(run):
  port = prove_scale.build_port("mlp", 0.5, 3, reference=False)
  strategy, _ = proof_module.prepare(port)
  module = next(r.module for r in strategy.runs if r.name == run)
  placement = module.make_placement(8)
  host = module.to_host(module.create_state(0, None, placement))
  assert all(leaf.flags.owndata for leaf in jax.tree.leaves(host)), run


def _raising_at(step, made):
  """`made`'s step, raising where the state has taken `step - 1` steps (a
  port that compiles, runs, then fails: a device mismatch, a shape)."""
  def port_step(state, batch):
    if not isinstance(state.step, jax.core.Tracer) and int(
        np.ravel(state.step)[0]) == step - 1:  # pmap's: one per device
      raise ValueError("planted: the port's step cannot run here")
    return made(state, batch)
  return port_step


@pytest.mark.parametrize("step", [1, 3])
def test_a_port_step_that_raises_fails_at_its_step(step):
  """A verdict, not a crash: the step and the run named, exit 1."""
  from tests import toy_ports  # pylint: disable=g-import-not-at-top
  right = toy_ports.port(steps=4)
  proof = compare.prove(toy_ports.port(
      steps=4, port_step=_raising_at(step, right.port_step)), windows=0)
  assert proof.verdict == "fail" and proof.exit_code == 1
  assert proof.first_failure.startswith(
      f"first at step {step}: port's step raised where reference's ran: "
      "ValueError: planted"), proof.first_failure


def test_pmap_raising_is_still_a_crash():
  """pmap's step is the team's program as it runs today: a raise there is
  the Port's to fix (the proof crashes with its cause)."""
  from tests import toy_ports  # pylint: disable=g-import-not-at-top
  right = toy_ports.port(steps=2)
  with pytest.raises(ValueError, match="planted") as raised:
    compare.prove(toy_ports.port(
        steps=2, pmap_step=_raising_at(2, right.pmap_step)), windows=0)
  # The run and the step named (the command line's crash line shows it).
  assert raised.value.__notes__ == ["in pmap's step 2"]


def test_the_crash_line_names_the_run_and_the_step(capsys, monkeypatch):
  from compare._src import cli  # pylint: disable=g-import-not-at-top
  from compare._src.prove import outcome  # pylint: disable=g-import-not-at-top

  def crash(*args, **kwargs):
    err = ValueError("planted")
    err.add_note("in pmap's step 2")  # as runner.train adds it
    raise err

  monkeypatch.setattr(outcome, "compare", crash)
  assert cli.main(["--strategy", "data_parallel", "--workload", "linreg",
                   "--steps", "2", "--quiet"]) == cli.EXIT_CRASH
  assert capsys.readouterr().err.splitlines()[-1] == (
      "compare: crashed: ValueError: planted (in pmap's step 2; exit 4; "
      "--traceback shows where)")


def test_runs_sharing_one_host_copy_all_diverge_together():
  """A right port's state is pmap's, one host copy for both: where it holds
  a non-finite value under a finite loss, every run sharing it is told it
  diverged, not the first alone."""
  blown = {"params": {"w": np.array([1.0, np.inf], np.float32)}}

  def run(name):
    module = types.SimpleNamespace(
        put_batch=lambda batch, placement: batch,
        to_host=lambda state: jax.tree.map(np.copy, blown),
        metrics_to_host=lambda metrics: metrics)
    return types.SimpleNamespace(
        name=name, module=module, perturbation=None, local_batch=False,
        placement=None, same_as=None, since_eval=[], losses=[],
        state=None, step=lambda state, batch: (state, {"loss": 0.5}))

  fetched = {}
  finite = [runner._step(run(name), {"x": np.ones(2)}, 1, 8, fetched)  # pylint: disable=protected-access
            for name in ("pmap", "port")]
  assert finite == [False, False]
  assert len(fetched) == 1  # one host copy, checked once
