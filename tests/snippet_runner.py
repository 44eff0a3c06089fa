"""Runs the guide's python blocks, each as if pasted into an empty file.

    python tests/snippet_runner.py BLOCKS.json

BLOCKS.json: `[{"where", "imports", "code", "calls"}, ...]`
(`tests/test_snippets.py` writes it). Each block runs in a namespace of its
own, after its page's import block, as `__main__`, from the repository root:
what a reader gets who pastes the page's imports and the block into a new
file there. Then each function the block defines (at top level, or as a
method of a class it defines) must have run: called by the block itself, or
by the block's entry in `calls` (`tests/snippet_calls.py`: small inputs the
test passes), run in the block's namespace afterwards. A function neither
calls is an error, so a block that only defines names it cannot call fails.
One process for every block, so jax is imported once. Prints one JSON line
per block: `{"where", "error", "functions", "by_block", "by_test"}`, error
None when it ran.
"""

import ast
import json
import os
import sys
import traceback


def defined_functions(code: str) -> list[str]:
  """The names of the block's top-level functions and its classes' methods."""
  names = []
  for node in ast.parse(code).body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      names.append(node.name)
    elif isinstance(node, ast.ClassDef):
      names += [f"{node.name}.{item.name}" for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))]
  return names


def _started(where: str, seen: set):
  """A profile hook that records (name, first line) of each frame of `where`.

  The hook sees every Python call, so it only compares a filename: the
  blocks are compiled under their `where`, which no other code carries.
  """
  def hook(frame, event, arg):  # pylint: disable=unused-argument
    if event == "call" and frame.f_code.co_filename == where:
      seen.add(frame.f_code.co_qualname)
  return hook


def _exec_seen(source: str, where: str, namespace: dict, seen: set) -> None:
  """Runs `source` in `namespace`, adding to `seen` what of `where` ran."""
  previous = sys.getprofile()
  sys.setprofile(_started(where, seen))
  try:
    exec(compile(source, where, "exec"), namespace)  # pylint: disable=exec-used
  finally:
    sys.setprofile(previous)


def run_block(block: dict) -> dict:
  """Runs one block, then its test calls; what ran and the first error."""
  where, code = block["where"], block["code"]
  functions = defined_functions(code)
  by_block, by_test, error = set(), set(), None
  namespace = {"__name__": "__main__"}
  try:
    # The page's imports run under another name: their helpers are not the
    # block's functions.
    exec(compile(block["imports"], where + ":imports", "exec"), namespace)  # pylint: disable=exec-used
    _exec_seen(code, where, namespace, by_block)
    _exec_seen(block.get("calls", ""), where, namespace, by_test)
    uncalled = [f for f in functions if f not in by_block | by_test]
    if uncalled:
      error = (f"defines {', '.join(uncalled)} but neither the block nor its "
               "entry in tests/snippet_calls.py calls it")
  except BaseException:  # pylint: disable=broad-except (a SystemExit too)
    error = traceback.format_exc(limit=-3)
  return {"where": where, "error": error, "functions": len(functions),
          "by_block": len([f for f in functions if f in by_block]),
          "by_test": len([f for f in functions
                          if f in by_test and f not in by_block])}


if __name__ == "__main__":
  # The page's import block emulates 8 CPU devices through XLA_FLAGS (the
  # suite's environment has them already).
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path.insert(0, root)
  os.chdir(root)
  with open(sys.argv[1], encoding="utf-8") as f:
    blocks = json.load(f)
  for one in blocks:
    print(json.dumps(run_block(one)), flush=True)
