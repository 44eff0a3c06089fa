"""Runs the guide's python blocks, each as if pasted into an empty file.

    python tests/snippet_runner.py BLOCKS.json

BLOCKS.json: `[{"where", "imports", "code"}, ...]` (`tests/test_snippets.py`
writes it). Each block runs in a namespace of its own, after its page's
import block, as `__main__`, from the repository root: what a reader gets
who pastes the page's imports and the block into a new file there. One
process for every block, so jax is imported once. Prints one JSON line per
block: `{"where", "error"}`, error None when it ran.
"""

import json
import os
import sys
import traceback

if __name__ == "__main__":
  # The page's import block emulates 8 CPU devices through XLA_FLAGS (the
  # suite's environment has them already).
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path.insert(0, root)
  os.chdir(root)
  with open(sys.argv[1], encoding="utf-8") as f:
    blocks = json.load(f)
  for block in blocks:
    source = block["imports"] + "\n" + block["code"]
    try:
      exec(compile(source, block["where"], "exec"), {"__name__": "__main__"})  # pylint: disable=exec-used
      error = None
    except BaseException:  # pylint: disable=broad-except (a SystemExit too)
      error = traceback.format_exc(limit=-3)
    print(json.dumps({"where": block["where"], "error": error}), flush=True)
