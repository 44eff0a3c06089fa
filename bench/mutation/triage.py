"""The triage file of `python -m bench.mutation`, read without mutmut.

`bench/mutation/triage.toml` judges each survivor: equivalent (with the
reason) or killed by a test added for it. Reading it is cheap (CI checks
it, tests/test_bench.py); that each entry's line is still its mutant's
needs mutmut (`python -m bench.mutation --check-triage`).
"""

import pathlib
import tomllib

from bench.mutation.targets import MODULES

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRIAGE = ROOT / "bench" / "mutation" / "triage.toml"


def load_triage(path=TRIAGE) -> dict:
  """`{mutant name: entry}` of the triage file's `[[mutant]]` entries.

  Raises:
    ValueError: a key outside every entry (an entry that lost its
      `[[mutant]]` line would be read as none), or a name twice.
  """
  with open(path, "rb") as f:
    loaded = tomllib.load(f)
  if set(loaded) - {"mutant"}:
    raise ValueError(f"{path}: keys outside any [[mutant]] entry: "
                     f"{sorted(set(loaded) - {'mutant'})}")
  names = [entry["name"] for entry in loaded.get("mutant", [])]
  if len(set(names)) != len(names):
    raise ValueError(f"{path}: a mutant triaged twice: "
                     f"{sorted({n for n in names if names.count(n) > 1})}")
  return {entry["name"]: entry for entry in loaded.get("mutant", [])}


def read_triage(triage: dict) -> tuple[list[str], dict]:
  """Without mutmut (cheap): the entries whose module is not one measured,
  whose function is not in today's source, or that judge nothing; and the
  entries' names by module."""
  problems, by_module = [], {}
  for name, entry in triage.items():
    short = name.split(".")[-2]  # the module: the part before the function
    if short not in MODULES:
      problems.append(f"{name}: {short} is not a module measured")
      continue
    by_module.setdefault(short, []).append(name)
    # mutmut's names: x_FUNCTION__mutmut_N, or xǁCLASSǁMETHOD__mutmut_N.
    function = name.split(".")[-1].split("__mutmut_")[0].split("ǁ")[-1]
    function = function[2:] if function.startswith("x_") else function
    source = (ROOT / MODULES[short][0]).read_text()
    if f"def {function}(" not in source:
      problems.append(f"{name}: no function {function} in {short}")
    if ("equivalent" in entry) == ("killed_by" in entry) or not entry.get(
        "line"):
      problems.append(f"{name}: needs its `line` and one of `equivalent`, "
                      "`killed_by`")
  return problems, by_module
