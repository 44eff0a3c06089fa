"""The guide's index of error messages quotes what JAX really prints.

Every wrong idiom of `docs/errors.py` runs here on 8 emulated devices; the
first line of what it raises must appear, verbatim, in docs/MIGRATION.md's
index, with a link to its fix. A JAX upgrade that changes a message fails
this test: re-record with `python -m docs.build_guide --measure errors`.
"""

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


@pytest.mark.parametrize("case", errors.CASES, ids=lambda c: c.id)
def test_the_guide_quotes_what_jax_prints(case):
  message = errors.quote(errors._raised(case.run))  # pylint: disable=protected-access
  assert tables.quoted(message) in GUIDE, (
      f"JAX now prints {message!r} for {case.idiom}; the guide does not "
      "quote it: run `python -m docs.build_guide --measure errors`")


@pytest.mark.parametrize("case", errors.CASES, ids=lambda c: c.id)
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
