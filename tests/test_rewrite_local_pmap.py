"""`--prove` of a pmap built inside a function (flax's nlp_seq builds its
`p_train_step` in `main`): the rewritten file's own port of it is proved
against the Port's pmap, and a wrong spec written there fails."""

import pathlib

from compare import rewrite
from compare._src.prove import port as port_module
from compare._src.rewrite.proof import rewrite_proof

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
SPEC = 'in_specs=(jax.P("batch"), jax.P("batch"))'


def _rewritten(tmp_path):
  target = tmp_path / "local_pmap_port_written.py"
  assert rewrite.main([str(INPUTS / "local_pmap_train.py"), "-o",
                       str(target)]) == 0
  assert target.read_text().count(SPEC) == 1
  return target


def test_a_pmap_made_inside_main_is_proved(tmp_path, capsys):
  target = _rewritten(tmp_path)
  team_port = port_module.load("tests.rewrite_inputs.local_pmap_port:port")
  code = rewrite_proof.prove(team_port, INPUTS / "local_pmap_train.py",
                             target, steps=3)
  out = capsys.readouterr().out
  assert code == 0, out
  assert "pmap of line 28 against" in out
  assert "port vs pmap             bitwise at every check" in out


def test_a_wrong_spec_in_the_written_port_fails(tmp_path, capsys):
  target = _rewritten(tmp_path)
  # Every device takes device 0's state and batch: what the file says is
  # what is proved.
  target.write_text(target.read_text().replace(
      SPEC, 'in_specs=(jax.P(), jax.P("batch"))'))
  team_port = port_module.load("tests.rewrite_inputs.local_pmap_port:port")
  code = rewrite_proof.prove(team_port, INPUTS / "local_pmap_train.py",
                             target, steps=3)
  assert code == 1
  assert "verdict: fail, first at step 1" in capsys.readouterr().out

