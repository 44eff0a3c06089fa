"""The guide's index of error messages quotes what JAX really prints.

Every wrong idiom of `docs/errors.py` runs here on 8 emulated devices; the
first line of what it raises must appear, verbatim, in docs/MIGRATION.md's
index, with a link to its fix. A JAX upgrade that changes a message fails
this test: re-record with `python -m docs.build_guide --measure errors`.
"""

import ast
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from docs import errors
from docs.guide import tables

pytestmark = pytest.mark.jax010  # the messages of jax >= 0.10

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "MIGRATION.md").read_text()
ANCHORS = set(re.findall(r'<a id="([\w-]+)"></a>', GUIDE))
MEASURED = ROOT / "docs" / "measured" / "errors.json"
# The packages whose names a reader's code does not have.
PACKAGES = ("shardport", "legacy_pmap", "sharded", "compare")


@pytest.mark.parametrize("case", errors.CASES, ids=lambda c: c.id)
def test_the_guide_quotes_what_jax_prints(case):
  message = errors.quote(errors._raised(case.run))  # pylint: disable=protected-access
  assert tables.quoted(message) in GUIDE, (
      f"JAX now prints {message!r} for {case.idiom}; the guide does not "
      "quote it: run `python -m docs.build_guide --measure errors`")


@pytest.mark.parametrize("case", errors.CASES + errors.RECORDED,
                         ids=lambda c: c.id)
def test_every_entry_is_findable_and_links_to_its_fix(case):
  assert f"err-{case.id}" in ANCHORS
  assert case.fix.startswith("#") and case.fix[1:] in ANCHORS, case.fix
  row = next(line for line in GUIDE.splitlines()
             if f'<a id="err-{case.id}"></a>' in line)
  assert f"[fix]({case.fix})" in row


def test_the_index_covers_the_wrong_idioms_the_issue_names():
  ids = {case.id for case in errors.CASES}
  assert {"device-put-replicated", "device-put-sharded", "in-specs-mismatch",
          "sharding-type-error", "pmap-explicit-keyerror", "context-mesh",
          "incompatible-devices", "optax-027"} <= ids
  messages = {case.id: errors.quote(errors._raised(case.run))  # pylint: disable=protected-access
              for case in errors.CASES
              if case.id in ("incompatible-devices", "sharding-type-error")}
  assert "Received incompatible devices" in messages["incompatible-devices"]
  assert messages["sharding-type-error"].startswith("ShardingTypeError:")


@pytest.mark.parametrize("entry", errors.RECORDED, ids=lambda e: e.id)
def test_a_recorded_row_quotes_the_repository_verbatim(entry):
  """A row not rerun quotes its source word for word, and the guide it."""
  source = " ".join((ROOT / entry.source).read_text().split())
  assert entry.message in source, (entry.message, entry.source)
  assert entry.id not in {case.id for case in errors.CASES}
  assert tables.quoted(entry.message) in GUIDE


def _defined_names():
  """The names this repository defines: the top-level defs and classes of
  its packages, and every def and class of docs/errors.py (at any depth: a
  case's nested function is quoted by its name, a lambda by its case's)."""
  names = set()
  for package in PACKAGES:
    for path in (ROOT / package).rglob("*.py"):
      names |= {node.name for node in ast.parse(path.read_text()).body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                     ast.ClassDef))}
  names |= {node.name for node in ast.walk(ast.parse(
      (ROOT / "docs" / "errors.py").read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.ClassDef))}
  return names


def _ours(name):
  """Whether `name` is this repository's own rather than anyone's: private
  (`_ring_sum`) or of several words (`device_sum`, `TrainState`). A single
  word (`f`, `step`, `get`, `collectives`) is every codebase's, and JAX's
  own prose uses some of them."""
  word = name.lstrip("_")
  return (name.startswith("_") or "_" in word or
          len(re.findall(r"[A-Z][a-z0-9]", word)) > 1)


def repository_names_in(messages):
  """{id: [names of this repository that the message quotes]}."""
  ours = {name for name in _defined_names() if _ours(name)}
  found = {key: sorted(set(re.findall(r"[A-Za-z_]\w*", message)) & ours)
           for key, message in messages.items()}
  return {key: names for key, names in found.items() if names}


def test_no_quoted_message_names_this_repository():
  """The index quotes what a reader's code makes JAX print, not ours."""
  messages = json.loads(MEASURED.read_text())["messages"]
  messages.update({e.id: e.message for e in errors.RECORDED})
  assert repository_names_in(messages) == {}


def test_the_name_check_sees_a_repository_name():
  assert repository_names_in({
      "a": "shard_map applied to the function '_ring_sum' was given",
      "b": "Got argument a of _incompatible_devices.<locals>.<lambda> with",
      "c": "the function 'loss_fn'",  # shardport.workloads.ensemble.loss_fn
      "d": "shard_map applied to the function 'step' was given"}) == {
          "a": ["_ring_sum"], "b": ["_incompatible_devices"],
          "c": ["loss_fn"]}


def test_a_clean_idiom_is_not_mistaken_for_an_error():
  with pytest.raises(AssertionError, match="ran without an error"):
    errors._raised(lambda: None)  # pylint: disable=protected-access


@pytest.mark.skipif(
    not os.environ.get("OPTAX_027_PATH"),
    reason="optax 0.2.7 cannot be installed beside optax 0.2.8 in the test "
    "environment; to check the real import, `pip install --no-deps --target "
    "DIR optax==0.2.7` and set OPTAX_027_PATH=DIR")
def test_real_optax_027_fails_on_import_as_the_guide_says():
  result = subprocess.run(
      [sys.executable, "-c", "import optax"], capture_output=True, text=True,
      env={**os.environ, "PYTHONPATH": os.environ["OPTAX_027_PATH"]},
      check=False)
  assert result.returncode != 0
  last = result.stderr.strip().splitlines()[-1]
  assert tables.quoted(last) in GUIDE, last
