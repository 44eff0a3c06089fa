"""The suite's strength, measured: mutation testing of the verdict and rewrite.

    python -m bench.mutation [--modules verdicts,leaf_bands] [--max-mutants N]
        [--seed 0] [--survivors DIR] [--json PATH] [--recount PATH]

On mutmut (the `mutation` extra, pinned): each module of
`bench/mutation/targets.py` is mutated on its own in a scratch copy of HEAD
(`--workdir`; the checkout is never touched: others run code from it), and
each mutant runs the fast tests that reach the function it changed (mutmut
records which test calls which function in a first run). The tests that
run whole programs are left out by name (`SLOW`), and so are those failing
unmutated; both are printed.

Prints, per module, the mutants killed, timed out (caught: the mutant hung
a test), survived, reached by no fast test, and judged equivalent in
`bench/mutation/triage.toml` (with the reason), and the share caught of the
rest. `--survivors DIR` writes each untriaged survivor's diff. A module
takes a minute to a quarter of an hour on 2 busy cores; `--max-mutants`
runs a seeded sample instead, and the table says so (docs/mutation-testing.md).
"""

import argparse
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from xml.etree import ElementTree

from bench.mutation import tally
from bench.mutation.targets import MODULES
from bench.mutation.triage import load_triage
from bench.mutation.triage import read_triage
from bench.mutation.targets import SLOW

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The tree a mutant's tests import besides `compare` (mutmut's also_copy).
ALSO_COPY = ("shardport", "legacy_pmap", "sharded", "examples", "docs",
             "bench", "tests")
MUTMUT = str(pathlib.Path(sys.executable).parent / "mutmut")
# What mutmut's fork server imports before it forks a mutant's process:
# libraries whose import starts no thread. Not jax: imported before
# tests/conftest.py sets XLA_FLAGS it has one CPU device, the conftest
# refuses, and every mutant counted as killed (seen on issue 73's first
# runs: 100% everywhere, the triaged equivalents among the "killed").
PRELOAD = "mutmut_preload.txt"
PRELOADED = ("pytest", "numpy", "libcst")


def _scratch(workdir: pathlib.Path, commit: str, path: str, tests,
             failing=()) -> pathlib.Path:
  """A fresh copy of `commit` (HEAD as the run started: what was committed,
  not the work in progress around it) set up to mutate `path` alone,
  `failing` tests left out."""
  if workdir.exists():
    shutil.rmtree(workdir)
  workdir.mkdir(parents=True)
  archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True,
                           capture_output=True).stdout
  subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive,
                 check=True)
  deselect = [a for test in (*SLOW, *failing)
              if test.split("::")[0] in tests for a in ("--deselect", test)]
  config = {
      "source_paths": ["compare"], "only_mutate": [path],
      "pytest_add_cli_args_test_selection": [*tests, *deselect],
      # One process: the machine has 2 cores and others work on it.
      "pytest_add_cli_args": ["-n", "0", "-p", "no:cacheprovider"],
      "also_copy": list(ALSO_COPY),
      # Each mutant's tests in a process forked from a server that imported
      # the libraries only: forked from mutmut's own process, where the
      # tests had run, a test that runs jax hangs (XLA's threads do not
      # survive a fork) and the hang was counted as a timeout, caught.
      "process_isolation": "forkserver", "forkserver_warmup": "import",
      "preload_modules_file": PRELOAD}
  (workdir / PRELOAD).write_text("\n".join(PRELOADED) + "\n")
  lines = ["", "[tool.mutmut]"] + [
      f"{key} = {json.dumps(value)}" for key, value in config.items()]
  with open(workdir / "pyproject.toml", "a", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return workdir


def failing_unmutated(scratch: pathlib.Path, tests) -> list[str]:
  """The fast tests (node ids, with their parameters) that fail on HEAD
  itself, unmutated: mutmut judges no mutant while one does."""
  deselect = [a for test in SLOW if test.split("::")[0] in tests
              for a in ("--deselect", test)]
  report = scratch / "unmutated.xml"
  done = subprocess.run(
      [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider",
       "-q", "-o", "addopts=", f"--junitxml={report}", *tests, *deselect],
      cwd=scratch, capture_output=True, text=True, check=False)
  if not report.is_file():  # pytest never ran: no test to judge by
    last = (done.stderr or done.stdout).strip().splitlines()[-1:]
    raise SystemExit(f"bench.mutation: pytest could not run the tests of "
                     f"{tests[0]} in {scratch}: {''.join(last)}")
  failed = []
  for case in ElementTree.parse(report).iter("testcase"):
    if case.find("failure") is not None or case.find("error") is not None:
      module = case.get("classname").replace(".", "/")
      failed.append(f"{module}.py::{case.get('name')}")
  return sorted(failed)


def mutants_of(path: str, only=None) -> dict:
  """`{mutant name: diff}` of every mutant mutmut makes of `path` (or of
  those named in `only`, the rest with no diff: "").

  Run where a pyproject.toml has a `[tool.mutmut]` table (mutmut reads its
  configuration from the working directory)."""
  # pylint: disable=g-import-not-at-top
  import difflib
  import libcst as cst
  from mutmut.mutation import diff_apply
  from mutmut.mutation.file_mutation import mutate_file_contents
  from mutmut.utils.format_utils import get_mutant_name
  mutated = mutate_file_contents(path, pathlib.Path(path).read_text())
  # One parse of the file of all mutants (mutmut's own `show` parses it
  # again for each mutant: minutes for a module of 400 lines).
  module = cst.parse_module(mutated.code)
  diffs = {}
  for short in mutated.mutant_names:
    name = get_mutant_name(pathlib.Path(path), short)
    if only is not None and name not in only:
      diffs[name] = ""
      continue
    old, new = (cst.Module([f(module, name)]).code.strip().split("\n")
                for f in (diff_apply.read_original_function,
                          diff_apply.read_mutant_function))
    diffs[name] = "\n".join(difflib.unified_diff(
        old, new, fromfile=path, tofile=path, lineterm=""))
  return diffs


def _mutants_in(cwd, path: str, only=()) -> dict:
  """`mutants_of(path)` in a process of its own, run in `cwd`."""
  done = subprocess.run(
      [sys.executable, "-m", "bench.mutation", "--mutants-of", path,
       *(["--only", ",".join(only)] if only else [])],
      cwd=cwd, check=True, capture_output=True, text=True,
      env={**os.environ, "PYTHONPATH": str(ROOT)})
  return json.loads(done.stdout)


def _say_failing(tests):
  for test in tests:
    print(f"  fails unmutated, left out: {test.splitlines()[0]}", flush=True)


def run_module(short: str, args, triage: dict, failing: dict) -> dict:
  """Mutates one module in its scratch copy; its row of the table."""
  path, tests = MODULES[short]
  if tests not in failing:
    failing[tests] = failing_unmutated(_scratch(
        pathlib.Path(args.workdir) / short, args.commit, path, tests), tests)
    _say_failing(failing[tests])
  for _ in range(3):
    scratch = _scratch(pathlib.Path(args.workdir) / short, args.commit, path,
                       tests, failing[tests])
    diffs = _mutants_in(scratch, path)
    names = sorted(diffs)
    most = args.max_mutants.get(short, args.max_mutants.get("", 0))
    sampled = most and len(names) > most
    if sampled:
      names = sorted(random.Random(args.seed).sample(names, most))
    start = time.monotonic()
    cut = False
    with open(scratch / "mutmut.log", "w", encoding="utf-8") as log:
      try:
        subprocess.run(
            [MUTMUT, "run", "--max-children", "1",
             *(names if sampled else [])],
            cwd=scratch, stdout=log, stderr=subprocess.STDOUT, check=False,
            timeout=args.module_timeout)
      except subprocess.TimeoutExpired:
        cut = True  # what it checked so far is counted; the rest unchecked
    seconds = time.monotonic() - start
    logged = (scratch / "mutmut.log").read_text(errors="replace")
    if "failed to collect stats" not in logged:
      break
    # mutmut's own unmutated run (its functions wrapped) failed a test the
    # plain run passed: left out too, and said so.
    more = sorted(set(re.findall(r"^FAILED (\S+)", logged, re.M)))
    if not more:
      raise SystemExit(f"{short}: mutmut's unmutated run failed, see "
                       f"{scratch / 'mutmut.log'}")
    _say_failing(more)
    failing[tests] = [*failing[tests], *more]
  row = {"module": short, "path": path, "mutants": len(names),
         "of": len(diffs), "sampled": bool(sampled), "seconds": seconds,
         "cut_at_timeout": cut, "seed": args.seed,
         "failing_unmutated": failing[tests], "commit": args.commit,
         "status": _statuses(scratch, names)}
  return tally.count(row, {n: diffs[n] for n in names}, triage)


def _statuses(scratch, names) -> dict:
  """`{mutant: mutmut's word for it}`, as `mutmut results` lists them."""
  listed = subprocess.run([MUTMUT, "results", "--all", "true"],
                          cwd=scratch, capture_output=True, text=True,
                          check=True).stdout
  status = {name: "not checked" for name in names}
  for line in listed.splitlines():
    name, _, word = line.strip().partition(": ")
    if name in status:
      status[name] = word
  return status


def recount(path: str, workdir: str, triage: dict) -> list[dict]:
  """The rows of an earlier run's `--json`, counted again with today's
  triage file (no mutant runs again). A row written before rows kept their
  statuses takes them from its scratch copy under `workdir`."""
  rows = json.loads(pathlib.Path(path).read_text())
  for row in rows:
    if "status" not in row:
      every = subprocess.run([MUTMUT, "results", "--all", "true"],
                             cwd=pathlib.Path(workdir) / row["module"],
                             capture_output=True, text=True,
                             check=True).stdout
      row["status"] = {name: word for name, word in (
          line.strip().split(": ", 1) for line in every.splitlines()
          if ": " in line) if not (row["sampled"] and word == "not checked")}
    tally.count(row, row["survivors"], triage)
  return rows


def check_triage(triage: dict) -> list[str]:
  """The triage entries that name no mutant of today's source, or whose
  recorded line is not that mutant's (the source moved under it)."""
  problems, by_module = read_triage(triage)
  with tempfile.TemporaryDirectory() as tmp:
    for short, names in by_module.items():
      path = MODULES[short][0]
      (pathlib.Path(tmp) / path).parent.mkdir(parents=True, exist_ok=True)
      shutil.copy(ROOT / path, pathlib.Path(tmp) / path)
      (pathlib.Path(tmp) / "pyproject.toml").write_text(
          '[tool.mutmut]\nsource_paths = ["compare"]\n')
      diffs = _mutants_in(tmp, path, names)
      for name in names:
        if name not in diffs:
          problems.append(f"{name}: no such mutant of {path}")
        elif triage[name]["line"] != tally.changed_line(diffs[name]):
          problems.append(f"{name}: its line is now "
                          f"{tally.changed_line(diffs[name])!r}")
  return problems


def _most(value: str) -> dict:
  """`--max-mutants`: `{"": N}` for every module, or `{module: N}`."""
  if "=" not in value:
    return {"": int(value)}
  pairs = (item.split("=") for item in value.split(",") if item)
  return {short: int(n) for short, n in pairs}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m bench.mutation",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--modules", default=",".join(MODULES),
                      help="comma-separated short names (default: all)")
  parser.add_argument("--max-mutants", type=_most, default={},
                      help="a seeded sample of N mutants per module: N, or "
                      "MODULE=N,... for those modules alone")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--survivors", help="write survivors' diffs here")
  parser.add_argument("--json", help="also write the rows here")
  parser.add_argument("--workdir", default=str(
      pathlib.Path(tempfile.gettempdir()) / "shardport-mutation"),
                      help="scratch copies of the tree, one per module")
  parser.add_argument("--module-timeout", type=float, default=3600,
                      help="seconds one module's mutmut run may take")
  parser.add_argument("--check-triage", action="store_true",
                      help="only check the triage file names real mutants")
  parser.add_argument("--recount", metavar="JSON",
                      help="count an earlier --json run again with today's "
                      "triage file (its --workdir kept)")
  parser.add_argument("--mutants-of", help=argparse.SUPPRESS)
  parser.add_argument("--only", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.mutants_of:
    only = set(args.only.split(",")) if args.only else None
    print(json.dumps(mutants_of(args.mutants_of, only)))
    return 0
  triage = load_triage()
  if args.check_triage:
    problems = check_triage(triage)
    print("\n".join(problems) or f"{len(triage)} triage entries, all real")
    return 1 if problems else 0
  if args.recount:
    rows = json.loads(pathlib.Path(args.recount).read_text())
    tally.print_head(rows[0].get("commit", "") if rows else "")
    for row in recount(args.recount, args.workdir, triage):
      tally.print_row(row)
    return 0
  shorts = [s for s in args.modules.split(",") if s]
  args.commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT,
                               capture_output=True, text=True,
                               check=True).stdout.strip()
  tally.print_head(args.commit)
  rows, failing = [], {}
  for short in shorts:
    row = run_module(short, args, triage, failing)
    rows.append(row)
    tally.print_row(row)
    if args.survivors:
      out = pathlib.Path(args.survivors) / short
      if out.exists():
        shutil.rmtree(out)  # an earlier run's survivors are not this one's
      out.mkdir(parents=True)
      for name, diff in row["survivors"].items():
        (out / f"{name.rsplit('.', 1)[-1]}.diff").write_text(diff + "\n")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
