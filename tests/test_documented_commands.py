"""Every `python -m compare` command line the README and `--help` show
runs, shortened (2 steps, 1 timing window), and exits 0; `--help` of both
commands shows defaults, exit codes and examples within 100 columns.

The multi-process line (`--processes`) is run by tests/test_multiprocess.py
and the training programs' lines by tests/test_train.py.
"""

import pathlib
import re
import shlex

import pytest

from compare import rewrite
from compare._src import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHORT = ["--steps", "2", "--windows", "0", "--quiet"]


def _documented() -> list[str]:
  readme = (ROOT / "README.md").read_text(encoding="utf-8")
  lines = re.findall(r"^(?:pip install -e \. && )?(python -m compare .*)$",
                     readme, re.M)
  lines += re.findall(r"^  (python -m compare .*)$",
                      cli.build_parser().format_help(), re.M)
  lines = {line for line in lines if "--processes" not in line}
  # A line that another extends (the same command with --plot) runs once.
  return sorted(line for line in lines
                if not any(o != line and o.startswith(line + " ")
                           for o in lines))


def test_the_readme_and_help_show_commands():
  commands = _documented()
  assert any("--strategy ensemble" in c for c in commands), commands
  assert any("--plot" in c for c in commands), commands
  assert len(commands) >= 4, commands


@pytest.mark.parametrize("command", _documented())
def test_a_documented_command_runs(command, tmp_path, capsys):
  argv = shlex.split(command)[3:]
  argv = [str(tmp_path / a) if a.endswith((".json", ".png")) else a
          for a in argv]
  argv = [a for i, a in enumerate(argv)
          if a != "--steps" and (i == 0 or argv[i - 1] != "--steps")]
  assert cli.main(argv + SHORT) == 0, capsys.readouterr()
  out = capsys.readouterr().out
  assert out.startswith("VERDICT: pass")
  for path in tmp_path.iterdir():
    assert path.stat().st_size > 0


@pytest.mark.parametrize("main", [cli.main, rewrite.main])
def test_help_shows_defaults_exit_codes_and_examples(main, capsys):
  with pytest.raises(SystemExit) as exit_info:
    main(["--help"])
  assert exit_info.value.code == 0
  text = capsys.readouterr().out
  assert "exit codes:" in text and "examples" in text
  assert re.search(r"^  4  ", text, re.M)  # the crash code is documented
  assert all(len(line) <= 100 for line in text.splitlines()), max(
      text.splitlines(), key=len)
  if main is cli.main:
    assert "ensemble: 7 epochs, batch 128" in text
    assert "(default 10)" in text and "update-1pct-from:N" in text
