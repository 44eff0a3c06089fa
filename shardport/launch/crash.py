"""A worker that raised: its one line, and an end that waits for no peer.

Both programs end a run that raised with one line on stderr, `PROG:
crashed: TYPE: MESSAGE (NOTES; exit 4)`, the notes naming where (`at step
N`, `in RUN's step N`). The local launcher (`shardport.launch.launcher`)
quotes that line when it names the worker, so a job of many processes ends
with the process, the step and the error in one line.

This module imports no jax.
"""

import os
import sys

EXIT_CRASH = 4
CRASHED = ": crashed: "


def line(prog: str, err: BaseException, hint: str = "") -> str:
  """`PROG: crashed: TYPE: FIRST LINE (NOTES; exit 4HINT)`."""
  text = str(err).strip().splitlines()
  where = "".join(f"{note}; " for note in getattr(err, "__notes__", []))
  return (f"{prog}{CRASHED}{type(err).__name__}: {text[0] if text else ''}"
          f" ({where}exit {EXIT_CRASH}{hint})")


def what(line_: str) -> str:
  """The error of a crash line, without its program's name (as quoted)."""
  return line_.split(CRASHED, 1)[1] if CRASHED in line_ else line_


def end(is_worker: bool, code: int = EXIT_CRASH) -> int:
  """Ends a worker of many processes now; returns `code` otherwise.

  A worker that raised alone would otherwise wait in jax.distributed's
  shutdown barrier (`--shutdown-timeout`, 30 s on localhost) for peers that
  sit in their next collective: its launcher would learn of the crash only
  then. Exiting at once lets the launcher stop the job within a second.
  """
  if not is_worker:
    return code
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access
