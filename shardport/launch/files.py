"""The files every shardport program writes: checked early, written whole.

A report, a result or a plot is written to a temporary file beside its
target and renamed over it, so that a run cut short leaves the old file or
none, never half of one. Imports no jax.
"""

import contextlib
import json
import math
import os
import tempfile


def check_writable(path: str, flag: str) -> None:
  """Raises OSError now, naming `flag`, if `path` cannot be written later."""
  folder = os.path.dirname(os.path.abspath(path))
  if os.path.isdir(path):
    raise OSError(f"{flag} {path} is a directory")
  if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
    raise OSError(f"{flag} {path}: cannot write in {folder}")


@contextlib.contextmanager
def replaced_atomically(path: str, suffix: str = ".tmp"):
  """Yields a temporary path beside `path`; renames it over `path` once the
  block finishes (removes it if the block raises)."""
  folder = os.path.dirname(os.path.abspath(path))
  handle, partial = tempfile.mkstemp(dir=folder, suffix=suffix)
  os.close(handle)
  try:
    yield partial
    os.replace(partial, path)
  finally:
    if os.path.exists(partial):
      os.remove(partial)


def _strict(value):
  """`value` with non-finite floats as strings: valid JSON, nothing lost."""
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)  # "nan", "inf", "-inf"
  if isinstance(value, dict):
    return {k: _strict(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_strict(v) for v in value]
  return value


def write_json(report: dict, path: str) -> None:
  """Writes `report` to `path` atomically (temp file, then rename).

  Non-finite numbers (a run that blew up) are written as the strings
  "nan", "inf" and "-inf", so the file stays valid JSON.
  """
  with replaced_atomically(path) as partial:
    with open(partial, "w") as f:
      json.dump(_strict(report), f, indent=1, allow_nan=False)
