"""Team programs written elsewhere, proved through the public API only
(examples/team_programs): every correct port passes, every wrong port fails at
its step, a 1% plant fails where it starts, a donating port gets a
verdict, and a 1-device mesh is refused."""

import importlib

import pytest

import compare
from examples.team_programs import linen_conv_bn

STEPS = 8
# A wrong port's proof: past the latest step a wrong port fails at.
WRONG_STEPS = 3


def _program(name):
  return importlib.import_module(f"examples.team_programs.{name}")


def _first_step(proof) -> int | None:
  """The step `proof.first_failure` names ("first at step N: ...")."""
  if proof.first_failure is None:
    return None
  return int(proof.first_failure.split("first at step ")[1].split(":")[0])


# Each program's wrong ports and the step each must fail at.
# linen_conv_bn's local_accuracy leaves one metric wrong, the last by name
# (train_accuracy, after grad_norm and loss): a verdict judging only the
# first metric of a step passes it.
WRONG_PORTS = {
    "linen_conv_bn": {"psum_grads": 1, "bn_no_axis": 1, "default_vma": 1,
                      "local_accuracy": 1},
    "nnx_bn_dropout": {"local_bn": 1, "same_dropout_key": 1},
    "equinox_bn": {"local_grads": 1, "local_loss": 1},
    "stax_optimizers": {"default_vma": 1, "local_loss": 1},
    "static_flag_donate": {"flag_lost": 1, "rng_not_split": 1},
    # Its schedule's first value is init_value on both sides: the port's
    # own warm-up, counted in per-device batches, parts from step 2.
    "own_optimizer": {"warmup_per_device": 2, "decay_by_name": 1},
    "ema_clip": {"ema_before_update": 1, "updates_averaged": 1},
    "scan_accumulation": {"pmean_in_scan": 1, "loss_over_microbatches": 1},
    # A transformer's proof takes 40 s on 2 cores: one wrong port here, both
    # in the appendix's run (docs/team_programs.py).
    "linen_lm_dropout": {"one_dropout_key": 1},
}


@pytest.mark.parametrize("name", sorted(WRONG_PORTS))
def test_a_correct_port_passes(name):
  proof = compare.prove(_program(name).port(steps=STEPS), windows=0)
  assert proof.verdict == "pass", proof.table()


@pytest.mark.parametrize("name, wrong", [
    (name, wrong) for name, ports in sorted(WRONG_PORTS.items())
    for wrong in ports])
def test_a_wrong_port_fails_at_its_step(name, wrong):
  # The program as the correct port's test builds it (its schedules span
  # STEPS), proved only past the step it fails at (CI time): the steps
  # after it cannot make an earlier one fail, and each wrong port is many
  # times over the band (its first failure says by how much).
  proof = compare.prove(_program(name).port(wrong, steps=STEPS),
                        steps=WRONG_STEPS, windows=0)
  assert proof.verdict == "fail"
  assert _first_step(proof) == WRONG_PORTS[name][wrong], proof.first_failure


@pytest.mark.parametrize("control, step", [
    ("update-1pct-at:1", 1), ("update-1pct-at:6", 6),
    ("update-1pct-from:6", 6)])
def test_a_one_percent_plant_beside_a_rounding_noise_leaf_fails_at_its_step(
    control, step):
  # The convolution's bias before BatchNorm has no true gradient: its band
  # is its whole update. Judged over the whole state, it hid these plants.
  proof = compare.prove(linen_conv_bn.port(steps=STEPS), control=control,
                        windows=0)
  assert _first_step(proof) == step, proof.table()
  unjudged = proof.report["lockstep"]["unjudged_leaves"]
  assert list(unjudged) == ["['params']['Conv_0']['bias'] (16,)"]
  assert "not judged" in proof.table() and "Conv_0" in proof.table()


def test_a_donating_multisteps_port_gets_a_verdict_at_step_one():
  # optax.MultiSteps(k=4), both steps donate their state: the lockstep
  # placement once reused the accumulator's buffers from the initial state
  # (a segfault after "Buffer has been deleted or donated"), and the
  # accumulated gradients were never compared, so psum-for-pmean showed
  # only at step 4, the first real update.
  right = compare.prove(linen_conv_bn.port(steps=STEPS, multi_steps=4),
                        windows=0)
  assert right.verdict == "pass", right.table()
  wrong = compare.prove(linen_conv_bn.port("psum_grads", steps=STEPS,
                                           multi_steps=4),
                        steps=WRONG_STEPS, windows=0)
  assert _first_step(wrong) == 1, wrong.first_failure
  assert "acc_grads" in wrong.first_failure


def test_a_one_device_mesh_is_refused_unless_asked_for():
  port = linen_conv_bn.port(steps=STEPS, devices=1)
  with pytest.raises(compare.PortError, match="mesh: 1 device.*emulate"):
    compare.prove(port)
  with pytest.raises(AssertionError, match="mesh: 1 device"):
    compare.testing.assert_port_equivalent(port)
  # Asked for, it runs (and proves nothing about the collectives).
  assert compare.prove(port, steps=2, one_device=True,
                       windows=0).verdict == "pass"


def test_a_port_init_whose_non_array_leaves_differ_is_refused():
  # The equinox port's BatchNorm built with axis_name="batch" where the
  # program's has ("batch", "devices"): the same arrays, another pytree,
  # which crashed mid-run before.
  from examples.team_programs import equinox_bn  # pylint: disable=g-import-not-at-top
  port = equinox_bn.port(steps=STEPS)
  port = type(port)(**{**vars(port), "port_init": lambda: equinox_bn.create(
      axis_name="batch")})
  with pytest.raises(compare.PortError, match="port_init's state has "
                     "init's arrays but another pytree"):
    compare.prove(port)


def test_the_end_evaluates_the_final_shared_state():
  # The shared evaluation is of the truth's final state: pmap's own
  # evaluation of its final state is that evaluation, to the bit (run on
  # the initial state instead, it is not).
  proof = compare.prove(linen_conv_bn.port(steps=STEPS, with_eval=True),
                        windows=0)
  assert proof.verdict == "pass", proof.table()
  shared = proof.report["lockstep"]["shared_eval"]
  for key in ("test_loss", "test_accuracy"):
    assert shared["pmap"][key] == proof.report["runs"]["pmap"][key]
  initial = linen_conv_bn.evaluate(linen_conv_bn.create_state(steps=STEPS))
  assert shared["pmap"]["test_loss"] != initial["test_loss"]


def test_a_tuple_states_second_element_is_compared_at_step_one():
  # optax's (params, opt_state): a port whose momentum comes back 1% large
  # moves no parameter at step 1; only the comparison of opt_state, the
  # tuple's second element, sees it there.
  import jax  # pylint: disable=g-import-not-at-top
  from examples.optax_tuple import prove as optax_tuple  # pylint: disable=g-import-not-at-top
  from examples.optax_tuple import train_port  # pylint: disable=g-import-not-at-top

  def make_step(mesh):
    step = train_port.make_step(mesh)

    def wrong(params, opt_state, batch):
      params, opt_state, loss = step(params, opt_state, batch)
      return params, jax.tree.map(
          lambda x: x * 1.01 if x.dtype == "float32" else x, opt_state), loss
    return wrong

  proof = compare.prove(optax_tuple.port(make_step, steps=4), windows=0)
  assert _first_step(proof) == 1, proof.first_failure
  assert "most at ['params'][1]" in proof.first_failure


def test_a_plant_in_a_donating_multisteps_port_fails_at_the_first_update():
  # The planted port's module is a wrapper of the port's run: it keeps the
  # run's own placement (`from_host`), or the lockstep's placement would
  # go through the canonical view, which a MultiSteps state is not. The
  # plants count optimiser steps: the first is the 4th call, where
  # MultiSteps updates the parameters.
  proof = compare.prove(linen_conv_bn.port(steps=STEPS, multi_steps=4),
                        control="update-1pct-at:1", windows=0)
  assert _first_step(proof) == 4, proof.first_failure
