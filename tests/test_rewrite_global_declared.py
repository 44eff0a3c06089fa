"""`--global --prove`: a step the file never calls takes the layout the
team's `compare.Port` declares, and is proved on it.

A steps module (the pmap built here, called by the team's loop in another
file) gives the reading no call to learn its arguments' layouts from. The
Port says what its callers pass: `(state, batch)`, the state replicated,
the batch split by rows (or, through `compare.adapt_step`, the arguments it
spreads them over). The global step is written to that layout, its metrics
kept per device, and proved against the original pmap.
"""

import dataclasses
import pathlib
import re

import pytest

from compare import rewrite
from compare._src.prove import adapt
from compare._src.prove import port as port_module
from compare._src.rewrite import pipeline
from compare._src.rewrite.proof import rewrite_proof
from compare._src.rewrite.plan.global_layouts import B, R, S

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
PORTS = "tests.rewrite_inputs.steps_module_port"
STEP = ("p_train_step = jax.pmap(train_step, axis_name=\"batch\", "
        "donate_argnums=(0,))\n")
MODULE = "import jax\n\ndef train_step(state, batch):\n  return state, 0\n\n"


def _findings(rewrite_):
  return [(f.line, f.kind, f.text) for f in rewrite_.findings]


def test_a_step_never_called_is_refused_without_a_port():
  got = pipeline.rewrite_global_source(MODULE + STEP)
  assert "jax.device_put" not in got.code
  assert any(kind == "person" and "p_train_step is never called in this "
             "file" in text and "--prove" in text
             for _, kind, text in _findings(got)), _findings(got)


def test_the_declared_step_takes_the_ports_layout():
  got = pipeline.rewrite_global_source(
      MODULE + STEP + "port = Port(pmap_step=p_train_step)\n",
      declared=pipeline.Declared.of("p_train_step"))
  # The step's callers, out of view, are a person's: said by line.
  person = [(line, text) for line, kind, text in _findings(got)
            if kind == "person"]
  assert [line for line, _ in person] == [6], _findings(got)
  assert "p_train_step's callers are outside this file" in person[0][1]
  # (state, batch) on the module's mesh, no helper; the metrics per
  # device: pmap's view in the function's own return.
  assert 'in_specs=(jax.P(), jax.P("batch"))' in got.code
  assert 'out_specs=(jax.P(), jax.P("batch"))' in got.code
  assert "return state, jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0), 0)" in got.code
  assert "_pmap_" not in got.code
  assert any(text.startswith("the Port's layout: p_train_step")
             for _, _, text in _findings(got))


def test_another_step_handed_on_stays_refused():
  # The Port declares one step; another, handed to a loop elsewhere, is
  # still out of view.
  got = pipeline.rewrite_global_source(
      MODULE + STEP + "p_eval = jax.pmap(train_step, 'batch')\n"
      "loop(p_train_step, p_eval)\n",
      declared=pipeline.Declared.of("p_train_step"))
  person = [text for _, kind, text in _findings(got) if kind == "person"]
  assert any("p_eval, a pmapped step, given to loop, not a function of this "
             "file" in t for t in person), person
  assert not any("p_train_step" in t for t in person), person
  assert "jax.device_put" not in got.code


def test_a_declared_step_called_otherwise_here_is_refused():
  got = pipeline.rewrite_global_source(
      MODULE + STEP + "keys = jax.random.split(k, 8)\n"
      "p_train_step(keys, keys)\n",
      declared=pipeline.Declared.of("p_train_step"))
  assert any(kind == "person" and "the Port declares" in text
             for _, kind, text in _findings(got)), _findings(got)


def test_adapt_step_declares_the_arguments_it_spreads():
  def step(*args):
    return args
  stax = adapt.adapt_step(step, step_index=True).signature
  optax_tuple = adapt.adapt_step(step, state_parts=2).signature
  tutorial = adapt.adapt_step(step, batch_keys=("xs", "ys")).signature
  keys_after = adapt.adapt_step(step, static_args=(1,)).signature
  # A value passed after the batch keeps pmap's layout (a key per device).
  assert pipeline.Declared.of("s", keys_after).args == [R, B, S]
  assert pipeline.Declared.of("s", stax).args == [R, R, B]
  assert pipeline.Declared.of("s", optax_tuple).args == [R, R, B]
  assert pipeline.Declared.of("s", optax_tuple).outs == [R, R, S]
  assert pipeline.Declared.of("s", tutorial).args == [R, B, B]


def test_a_pmap_bound_to_no_name_is_a_place_not_a_crash():
  # examples/team_programs/linen_lm_dropout.py returns its pmap from a
  # function: the second step crashed on it (KeyError) before.
  source = MODULE + ("def make_step():\n"
                     "  return jax.pmap(train_step, 'batch')\n")
  got = pipeline.rewrite_global_source(source)
  assert any(line == 7 and kind == "person" and "bound to no name" in text
             for line, kind, text in _findings(got)), _findings(got)


def test_a_crash_of_the_rewrite_has_its_own_exit_and_writes_nothing(
    tmp_path, monkeypatch, capsys):
  def crash(*_, **__):
    raise KeyError(124)
  monkeypatch.setattr(pipeline, "rewrite_global_source", crash)
  target = tmp_path / "out.py"
  code = rewrite.main([str(INPUTS / "steps_module.py"), "-o", str(target),
                       "--global"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 4
  assert len(err) == 1 and "the rewrite crashed on" in err[0], err
  assert "KeyError" in err[0] and not target.exists()


@pytest.mark.parametrize("source,spec", [
    ("steps_module.py", "port"), ("steps_module_stax.py", "update_port"),
    ("steps_factory.py", "factory_port")])
def test_the_declared_global_step_is_proved(source, spec, tmp_path, capsys):
  target = tmp_path / source
  code = rewrite.main([str(INPUTS / source), "-o", str(target), "--global",
                       "--prove", f"{PORTS}:{spec}", "--steps", "3"])
  out = capsys.readouterr().out
  # 1: the step's callers outside the file are a person's; the proof passed.
  assert code == 1, out[-3000:]
  assert "1 step(s) on the layout the Port declares" in out
  assert "1 place(s) need a person" in out
  assert "callers are outside this file" in out
  assert "pmap(s) rewritten to global arrays" in out
  assert "port vs pmap             bitwise at every check" in out
  assert re.search(r"^verdict: pass \((\d+) of \1 leaves judged\)$", out, re.M)
  # The table counts the written step's own all-reduce (one, as pmap's
  # program runs), not the harness's averaging of its per-device loss.
  port_row = re.search(r"^port(\s+\S+){10}$", out, re.M).group(0).split()
  assert port_row[7] == "1", port_row


def test_metrics_taken_as_one_copy_fail_the_proof(tmp_path, capsys):
  # The negative control: the loss is each device's own; written P() (one
  # copy, device 0's) it is not pmap's, and the proof says so at step 1.
  target = tmp_path / "steps_module.py"
  assert rewrite.main([str(INPUTS / "steps_module.py"), "-o", str(target),
                       "--global"]) == 1  # no Port: refused
  assert rewrite.main([str(INPUTS / "steps_module.py"), "-o", str(target),
                       "--global", "--prove", f"{PORTS}:port", "--steps",
                       "1"]) == 1
  written = 'out_specs=(jax.P(), jax.P("batch"))'
  view = "jax.tree.map(lambda a: jax.numpy.expand_dims(a, 0), loss)"
  assert written in target.read_text() and view in target.read_text()
  # Planted: the loss one value, P(), as device 0's copy, written so and
  # recorded so (the proof reads the writer's record of the port's axes).
  target.write_text(target.read_text().replace(
      written, "out_specs=(jax.P(), jax.P())").replace(view, "loss"))
  port = port_module.load(f"{PORTS}:port")
  records = rewrite_proof.written_rewrite(port, INPUTS / "steps_module.py",
                                          True)
  planted = dataclasses.replace(records, ports=tuple(
      dataclasses.replace(p, out_axes=(None, None),
                          out_specs="(jax.P(), jax.P())")
      for p in records.ports))
  capsys.readouterr()
  code = rewrite_proof.prove(port, INPUTS / "steps_module.py", target,
                             steps=3, global_step=True, rewrite=planted)
  assert code == 1
  assert "verdict: fail, first at step 1" in capsys.readouterr().out


def test_a_pmap_made_in_a_factory_takes_the_ports_layout(tmp_path):
  target = tmp_path / "steps_factory.py"
  assert rewrite.main([str(INPUTS / "steps_factory.py"), "-o",
                       str(target), "--global"]) == 1  # no Port: refused
  assert "jax.device_put" not in target.read_text()
  assert rewrite.main([str(INPUTS / "steps_factory.py"), "-o", str(target),
                       "--global", "--prove", f"{PORTS}:factory_port",
                       "--steps", "1"]) == 1
  # The state P(), the batch split, the key per device kept stacked:
  # pmap's view of it a line in the function's body.
  assert ("in_specs=(jax.P(), jax.P(AXIS), jax.P(AXIS))"
          in target.read_text())
  assert "  key = jax.tree.map(lambda a: a[0], key)" in target.read_text()
  assert "_pmap_" not in target.read_text()
