"""Copies of the repository for the guide's tests, and edits to them.

`tests/test_guide.py` (the build, drift and the programs) and
`tests/test_guide_documents.py` (the documents, their links, notes and
lengths) build the guide from a copy under tmp_path and change it there.
"""

import pathlib
import re
import shutil

import pytest

from docs.guide import figures

ROOT = pathlib.Path(__file__).resolve().parents[1]


# What the guide reads: the project's packages, its docs (both templates,
# both documents, the measurements), tests and constraints, and the README
# (the guide links its glossary); never virtual environments, data or build
# outputs.
_COPIED = ("legacy_pmap", "sharded", "compare", "shardport",
           "docs", "bench", "examples", "tests", "constraints",
           ".ci")
_COPIED_FILES = ("README.md",)


@pytest.fixture(name="copy")
def copy_of_the_repo(tmp_path):
  """The repo's sources under tmp_path (an allowlist: no venvs, no .git)."""
  root = tmp_path / "repo"
  root.mkdir()
  for name in _COPIED:
    if (ROOT / name).is_dir():
      shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns(
          "__pycache__", "*.egg-info", ".pytest_cache", "*.png", "*.orbax*"))
  for name in _COPIED_FILES:
    shutil.copy(ROOT / name, root / name)
  return root


def edit(path, old, new):
  text = path.read_text()
  assert old in text, f"{old!r} not in {path}"
  path.write_text(text.replace(old, new, 1))


def append(path, text):
  with open(path, "a") as f:
    f.write(f"\n{text}\n")


def section_of(text, anchor):
  """The body of the section under heading `anchor`, to the next heading."""
  body = text.split(f'<a id="{anchor}"></a>', 1)[1].split("\n", 1)[1]
  return re.split(r"^#{1,3} ", body, maxsplit=1, flags=re.M)[0]


def notes_in(text):
  return [line for line in text.splitlines()
          if line.startswith(figures.NOTE)]
