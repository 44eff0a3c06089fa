"""`--global` on our own pmap programs (`legacy_pmap/`): refused, by line.

Our programs are modules the engine calls: the pmap is built over the
devices the caller places (`devices=placement`), returned to a caller out
of the file, and fed by helpers of another module (`devices.replicate`,
`devices.shard_batch`). None of that is in view of one file, so the second
step is not written; the report must say so place by place (exit 1), and
the file must hold the first step, which trains bitwise as the original
(tests/test_rewrite.py). The global twins are `sharded/`, written by hand.
"""

import pathlib
import re

import pytest

from compare import rewrite

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Each program and a reason its report must give.
PLACES = {
    "data_parallel": "pmap over given devices",
    "accumulation": "step is never called in this file",
    "fsdp": "pmap over given devices",
    "ensemble": "a pmapped step, used as a value",
    "ensemble_data": "a pmap inside a pmap",
}


@pytest.mark.parametrize("name", sorted(PLACES))
def test_our_programs_are_refused_place_by_place(name, tmp_path, capsys):
  source = ROOT / "legacy_pmap" / f"{name}.py"
  port = tmp_path / f"{name}.py"
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 1
  out = capsys.readouterr().out
  person = re.findall(rf"{re.escape(str(source))}:(\d+): NEEDS A PERSON: "
                      r"(.*)", out)
  assert any(PLACES[name] in why for _, why in person), out
  counted = re.search(r"(\d+) place\(s\) need a person", out)
  assert counted and int(counted.group(1)) == len(person) > 0, out
  # Nothing of the second step is written, and nothing claims it was.
  assert (port.read_text().count("jax.device_put(")
          == source.read_text().count("jax.device_put("))
  assert "rewritten to global arrays" not in out
  assert "-> jax.device_put" not in out
