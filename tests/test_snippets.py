"""Every python block in docs/*.md runs as pasted, or says it is an excerpt.

A reader copies a block into an empty file after the page's import block
(the block under a link to a region whose tag ends in `imports`, stated
once per page) and runs it on 8 emulated CPU devices: it must run, and
every function it defines must run too, called by the block itself or by
its entry in `tests/snippet_calls.py` (small inputs, with an assertion on
what comes back), so a block that defines what it cannot call (a name
nothing defines) fails. A block that cannot run alone (a method out of its
class, a step that needs its program's data) is rendered by `<!-- excerpt:
REF -->` and its link line says "an excerpt", linking the file it runs in;
under a quarter of the blocks may be excerpts. One process runs every block
(`tests/snippet_runner.py`), each in a namespace of its own.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from tests import snippet_calls

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNNER = pathlib.Path(__file__).with_name("snippet_runner.py")
_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s#]+)")
_IMPORTS_REGION = re.compile(r"\(region `[\w.-]*imports`\)")
_REGIONS = re.compile(r"\(regions? ((?:`[\w.-]+`(?: \+ )?)+)\)")
_DEF = re.compile(r"\.py` `([\w.]+)`\]")


def key(block: dict) -> str:
  """`PAGE#TAG` (`A+B` for joined regions) or `PAGE::NAME`: the block's
  entry in `tests/snippet_calls.py`."""
  page = block["page"].name
  if found := _REGIONS.search(block["above"]):
    return f"{page}#" + found.group(1).replace("`", "").replace(" + ", "+")
  if found := _DEF.search(block["above"]):
    return f"{page}::{found.group(1)}"
  return f"{page}:?"


def blocks(page: pathlib.Path) -> list[dict]:
  """Each python block of `page`: where, its code, the line above it."""
  text = page.read_text()
  return [{"where": f"{page.name}:{text.count(chr(10), 0, m.start()) + 2}",
           "code": textwrap.dedent(m.group(2)), "page": page,
           "above": text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]}
          for m in _BLOCK.finditer(text)]


def sorted_blocks(pages, calls=None) -> tuple[list[dict], list[dict]]:
  """The blocks to run (each with its page's imports and its entry of
  `calls`, `{key: code}`) and the excerpts."""
  calls = snippet_calls.CALLS if calls is None else calls
  runnable, excerpts = [], []
  for page in pages:
    found = blocks(page)
    imports = next((b["code"] for b in found
                    if _IMPORTS_REGION.search(b["above"])), "")
    for block in found:
      if "an excerpt" in block["above"]:
        excerpts.append(block)
      else:
        runnable.append({**block, "imports": imports,
                         "calls": calls.get(key(block), "")})
  return runnable, excerpts


def missing_sources(excerpts: list[dict]) -> list[str]:
  """Each excerpt that links no file, or a file that does not exist."""
  return [b["where"] for b in excerpts
          if not (links := _LINK.findall(b["above"]))
          or not all((b["page"].parent / link).is_file() for link in links)]


def run(runnable: list[dict], tmp_path: pathlib.Path) -> list[dict]:
  """The runner's record of each block: `{where, error, functions,
  by_block, by_test}`."""
  path = tmp_path / "blocks.json"
  path.write_text(json.dumps([{k: b[k] for k in ("where", "imports", "code",
                                                 "calls")}
                              for b in runnable]))
  done = subprocess.run([sys.executable, str(RUNNER), str(path)],
                        capture_output=True, text=True, timeout=600,
                        env={**os.environ, "PYTHONPATH": str(ROOT)},
                        check=False)
  results = [json.loads(line) for line in done.stdout.splitlines()
             if line.startswith('{"where"')]
  assert len(results) == len(runnable), done.stdout[-2000:] + done.stderr[-3000:]
  return results


def failures(results: list[dict]) -> dict[str, str]:
  """{where: error} for each block that did not run or left a function
  uncalled."""
  return {r["where"]: r["error"] for r in results if r["error"]}


def test_every_block_runs_or_is_an_excerpt_of_a_file(tmp_path):
  pages = sorted(DOCS.glob("*.md"))
  runnable, excerpts = sorted_blocks(pages)
  total = len(runnable) + len(excerpts)
  stale = set(snippet_calls.CALLS) - {key(b) for b in runnable}
  assert not stale, f"entries of tests/snippet_calls.py for no block: {stale}"
  results = run(runnable, tmp_path)
  print(f"\nsnippets: {total} python blocks in {len(pages)} docs/*.md files: "
        f"{len(runnable)} ran, {len(excerpts)} excerpts; they define "
        f"{sum(r['functions'] for r in results)} functions: "
        f"{sum(r['by_block'] for r in results)} called by their block, "
        f"{sum(r['by_test'] for r in results)} by tests/snippet_calls.py")
  assert total > 40  # the extraction found the guide's blocks
  assert not missing_sources(excerpts)
  assert 4 * len(excerpts) < total, [b["where"] for b in excerpts]
  failed = failures(results)
  assert not failed, "\n".join(f"{where}:\n{error}"
                               for where, error in failed.items())


def test_a_block_that_raises_or_names_a_missing_file_is_caught(tmp_path):
  # Negative control: a planted page whose block raises after using its
  # page's imports, one that defines a function that reads a name nothing
  # defines (called by its entry: NameError), one that defines a function
  # nothing calls, and one that calls itself an excerpt of a missing file.
  page = tmp_path / "PLANTED.md"
  page.write_text("[`x.py` (region `page-imports`)](x.py):\n\n```python\n"
                  "import math\n```\n\n[`x.py`](x.py):\n\n```python\n"
                  "print(math.pi)\nraise ValueError('planted')\n```\n\n"
                  "[`x.py` (region `undefined`)](x.py):\n\n```python\n"
                  "def f():\n  return WEIGHTS\n```\n\n"
                  "[`x.py` (region `uncalled`)](x.py):\n\n```python\n"
                  "def g():\n  return 1\n```\n\n"
                  "[`x.py` (region `called`)](x.py):\n\n```python\n"
                  "def h():\n  return math.e\n```\n\n"
                  "[`gone.py`](gone.py), an excerpt:\n\n```python\n"
                  "x = 1\n```\n")
  calls = {"PLANTED.md#undefined": "f()", "PLANTED.md#called": "h()"}
  runnable, excerpts = sorted_blocks([page], calls)
  assert len(runnable) == 5 and len(excerpts) == 1
  results = run(runnable, tmp_path)
  failed = failures(results)
  assert sorted(failed) == ["PLANTED.md:10", "PLANTED.md:17",
                            "PLANTED.md:24"], failed
  assert "ValueError: planted" in failed["PLANTED.md:10"]
  assert "NameError: name 'WEIGHTS' is not defined" in failed["PLANTED.md:17"]
  assert "defines g but neither" in failed["PLANTED.md:24"]
  assert [(r["by_block"], r["by_test"]) for r in results][-1] == (0, 1)
  assert missing_sources(excerpts) == ["PLANTED.md:38"]
