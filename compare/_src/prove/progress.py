"""What `python -m compare` is doing, on stderr from the first second.

One line per phase (the data, each program compiled, the lockstep steps,
the timing), each with the seconds since the start; in a terminal the
steps also get tqdm's bar, and elsewhere (a CI log) a line at each quarter
of the steps. `--quiet` turns it all off. Lines before the options are
checked are held (`release`): bad input still answers with one line.
"""

import sys
import time

_START = time.perf_counter()
_state = {"quiet": False, "held": []}


def set_quiet(quiet: bool) -> None:
  """`--quiet`: no progress lines."""
  _state["quiet"] = quiet


def bar_shown() -> bool:
  """Whether the steps get a bar (stderr is a terminal, not quiet)."""
  return not _state["quiet"] and sys.stderr.isatty()


def phase(text: str) -> None:
  """One line: `[  12.3 s] text` (held until `release`)."""
  if _state["quiet"]:
    return
  line = f"[{time.perf_counter() - _START:7.1f} s] {text}"
  if _state["held"] is not None:
    _state["held"].append(line)
  else:
    print(line, file=sys.stderr, flush=True)


def hold() -> None:
  """A run begins: lines are held until its options are checked. The first
  run keeps what `python -m compare` held before it; a later run in the
  same process (a test calling `main` again) starts afresh."""
  if _state["held"] is None or _state.get("started"):
    _state["held"] = []
  _state["started"] = True


def release() -> None:
  """The options are good: the held lines, then every line as it comes."""
  held, _state["held"] = _state["held"], None
  if held and not _state["quiet"]:
    print("\n".join(held), file=sys.stderr, flush=True)


def step(done: int, total: int) -> None:
  """Without a bar: a line at each quarter of the steps."""
  if bar_shown() or total < 4:
    return
  if done in {total * q // 4 for q in (1, 2, 3, 4)}:
    phase(f"step {done} of {total}")
