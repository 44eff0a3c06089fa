"""`python -m compare`'s printed report fits 100 columns; `--json` keeps
every field whole (issue 59).

The reports measured for the guide (docs/measured) are printed through the
command's own `_show`, so the test costs no training run: a real report at
200 steps has every kind of detail line (the final pairs' free-running
drift ran to 351 columns), which a two-step test run would not.
"""

import argparse
import json
import pathlib

import pytest

from compare._src import cli
from compare._src.prove import proof
from compare._src.prove import report as report_module
from shardport import strategies

MEASURED = pathlib.Path(__file__).parent.parent / "docs" / "measured"


def _printed(capsys, full, tmp_path):
  """What `python -m compare` prints for `full`, and the JSON it writes."""
  path = tmp_path / "out.json"
  args = argparse.Namespace(sweep_devices=None, json=str(path), plot=None)
  capsys.readouterr()
  strategy = strategies.get(full["strategy"])
  cli._show(args, proof.Proof(full, tuple(strategy.report_lines(full))))  # pylint: disable=protected-access
  return capsys.readouterr().out, json.loads(path.read_text())


def _words(text):
  return " ".join(text.split())


@pytest.mark.parametrize("name", ["data_parallel", "ensemble"])
def test_every_printed_line_fits_and_the_json_is_whole(name, capsys, tmp_path):
  full = json.loads((MEASURED / f"{name}.json").read_text())
  out, written = _printed(capsys, full, tmp_path)
  wide = [line for line in out.splitlines()
          if len(line) > report_module.WIDTH]
  assert not wide, "\n".join(wide)
  # Negative control: the same report has detail lines far wider than the
  # screen before they are wrapped; wrapped, not cut: every word is shown.
  long = [line for line in report_module.verdict_lines(full)
          if len(line) > report_module.WIDTH]
  assert max(map(len, long)) > 300, "the control lost its long line"
  for line in long:
    assert _words(line) in _words(out)
  # The JSON is written from the report itself: no field shortened.
  assert written == full


def test_a_wide_line_anywhere_is_wrapped(capsys, tmp_path):
  # What no measured report has yet (a skipped run's long reason, a long
  # run name) is wrapped too: the wrapping is the printer's, not each line's.
  full = json.loads((MEASURED / "data_parallel.json").read_text())
  full["skipped_runs"] = {"pmap": "nested pmap fails: " + "x" * 150 + " end"}
  full["runs"]["a_long_run_name"] = full["runs"].pop("jit")
  out, _ = _printed(capsys, full, tmp_path)
  assert max(len(line) for line in out.splitlines()) <= report_module.WIDTH
  assert "a_long_run_name" in out and " end" in out
