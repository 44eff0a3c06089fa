"""What the migration changed: the unified diff between the two backends' module.

`python -m compare --show-diff data_parallel` prints `program_diff`. The
backends mirror each other file for file and function for function, so the
diff shows only the parallelism lines. The programs are the registered
strategies' (`shardport.strategies.STRATEGIES`).
"""

import difflib
import pathlib

from shardport import strategies

BACKENDS = ("legacy_pmap", "sharded")
# The backends are installed (or checked out) beside `compare/`.
ROOT = pathlib.Path(__file__).resolve().parents[2]


class ProgramError(ValueError):
  """An unknown program, or one whose module a backend does not have yet."""


def programs() -> tuple[str, ...]:
  """Every registered strategy's program, in registry order, once each."""
  return tuple(dict.fromkeys(s.program for s in strategies.STRATEGIES.values()))


def program_paths(program: str, root: pathlib.Path = ROOT) -> tuple[
    pathlib.Path, pathlib.Path]:
  """The legacy and the sharded module of `program`, both checked to exist."""
  if program not in programs():
    raise ProgramError(f"unknown program {program!r}; choose one of "
                       f"{', '.join(programs())}")
  paths = tuple(root / backend / f"{program}.py" for backend in BACKENDS)
  for path in paths:
    if not path.is_file():
      raise ProgramError(f"{path.relative_to(root)} does not exist (yet)")
  return paths


def program_diff(program: str, root: pathlib.Path = ROOT) -> str:
  """The unified diff from `legacy_pmap/<program>.py` to `sharded/<program>.py`.

  Args:
    program: a registered strategy's program, e.g. `data_parallel`.
    root: the directory holding both backends (the repo by default).

  Returns:
    The diff text, with `a/` and `b/` paths relative to `root`.

  Raises:
    ProgramError (a ValueError): for an unknown program or a missing module.
  """
  legacy, sharded = program_paths(program, root)
  lines = difflib.unified_diff(
      legacy.read_text().splitlines(keepends=True),
      sharded.read_text().splitlines(keepends=True),
      fromfile=f"a/{legacy.relative_to(root)}",
      tofile=f"b/{sharded.relative_to(root)}")
  return "".join(lines)
