"""`--global` on flax's examples/wmt `train.py` as its authors wrote it.

The file (tests/rewrite_inputs/flax_wmt_train.txt, kept as text: it is
flax's program, not ours, copied to `train.py` to be read) hands its
steps to its own functions (`evaluate(p_eval_step=p_eval_step, ...)`),
converts its state for Orbax, and reads pmap's layout in two places a
person must rewrite: a pmap over one device per host, and `tohost` of the
prediction batch. The report must name those and nothing else; with the person's
edit (`bench/real_programs/wmt_person.py`) the second step is written
whole. Running both is `bench/real_programs/wmt_mock.py`'s (tensorflow,
not in CI): docs/REWRITE.md has what it printed.
"""

import pathlib
import re
import shutil

from bench.real_programs import wmt_person
from compare import rewrite
from compare._src.rewrite import rewrite_helpers

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
# What the report must say of the file as written, and how often.
PLACES = {
    "pmap over given devices": 1,
    "tohost's parameter x is given values of different layouts": 1,
    "pred_batch is a global batch now": 2,
}
LEFT = ("jax_utils.replicate(", "common_utils.shard(", "unreplicate(",
        "prefetch_to_device(", "jax.pmap(")


def _global(folder, capsys):
  port = folder / "train_global.py"
  code = rewrite.main([str(folder / "train.py"), "-o", str(port), "--global"])
  return code, port, capsys.readouterr().out


def test_wmt_as_written_names_the_two_reads_of_pmaps_layout(tmp_path, capsys):
  shutil.copy(INPUTS / "flax_wmt_train.txt", tmp_path / "train.py")
  code, _, out = _global(tmp_path, capsys)
  assert code == 1, out
  person = re.findall(r"train\.py:\d+: NEEDS A PERSON: (.*)", out)
  assert len(person) == sum(PLACES.values()), person
  for why, count in PLACES.items():
    assert sum(why in line for line in person) == count, (why, person)
  assert re.search(r", 4 place\(s\) need a person", out), out


def test_wmt_with_the_persons_edit_takes_the_second_step(tmp_path, capsys):
  shutil.copy(INPUTS / "flax_wmt_train.txt", tmp_path / "train.py")
  edited = tmp_path / "edited"
  assert wmt_person.main(str(tmp_path), str(edited)) == 0
  code, port, out = _global(edited, capsys)
  assert code == 0, out
  assert "4 pmap(s) rewritten to global arrays" in out, out
  assert "0 place(s) need a person" in out, out
  text = rewrite_helpers.without_helpers(port.read_text())
  for call in LEFT:
    assert call not in text, call
  # No helper (its static p_pred_step: jit's static_argnums over a
  # shard_map built per eos_id, max_decode_len); the handed steps'
  # parameters are P() where the functions call them.
  assert "_pmap_" not in port.read_text()
  assert text.count("in_specs=(jax.P(), jax.P(\"batch\")") == 2, text
  assert "static_argnums=(3, 4))  # eos token, max_length" in text


def test_the_persons_edit_refuses_another_file(tmp_path):
  (tmp_path / "train.py").write_text("print('not wmt')\n")
  assert wmt_person.main(str(tmp_path), str(tmp_path / "out")) == 2
  assert not (tmp_path / "out").exists()
