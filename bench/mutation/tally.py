"""What a mutation run's statuses mean: each mutant counted and the table.

mutmut says of each mutant a word (`mutmut results --all true`): killed,
timeout, segfault, survived, no tests, or one of those it did not check.
`count` turns a module's words into caught, survived, unreached and
equivalent (by the triage file), and the share caught; `print_head` and
`print_row` show them. `mutate` runs the mutants and reads the words.
"""

from bench.mutation.targets import SLOW

# mutmut's status words for a caught mutant, as `mutmut results --all true`
# prints them, and the column each is counted in.
CAUGHT = {"killed": "killed", "timeout": "timeout", "segfault": "killed"}


def changed_line(diff: str) -> str:
  """The mutant's own line, as the triage file records it: the first line
  the mutant adds, stripped (`""` where it only removes)."""
  for line in diff.splitlines():
    if line.startswith("+") and not line.startswith("+++"):
      return line[1:].strip()
  return ""


def count(row: dict, diffs: dict, triage: dict) -> dict:
  """`row` counted by its `status` (mutant -> mutmut's word), the triage's
  equivalents set apart; `diffs` holds at least each survivor's."""
  row.update({"killed": 0, "timeout": 0, "survived": 0, "no_tests": 0,
              "equivalent": 0, "unchecked": 0, "survivors": {}, "stale": [],
              "suspect": []})
  for name, word in sorted(row["status"].items()):
    entry = triage.get(name)
    if word in CAUGHT:
      row[CAUGHT[word]] += 1
      if entry and "equivalent" in entry:
        row["suspect"].append(name)  # no input can kill it, yet killed
      continue
    if word not in ("survived", "no tests"):
      row["unchecked"] += 1  # skipped, suspicious, not checked
      continue
    # A survivor with no diff kept was an equivalent when it ran.
    diff = diffs.get(name)
    if entry and "equivalent" in entry and (
        diff is None or entry.get("line") == changed_line(diff)):
      row["equivalent"] += 1
      continue
    if entry and "killed_by" in entry:
      row["stale"].append(name)  # triaged as killed, yet it survives
    row["no_tests" if word == "no tests" else "survived"] += 1
    row["survivors"][name] = diff or ""
  judged = row["mutants"] - row["equivalent"] - row["unchecked"]
  row["caught_pct"] = (100.0 * (row["killed"] + row["timeout"]) / judged
                       if judged else 100.0)
  return row


def print_head(commit: str):
  """The table's head: the commit, the tests left out, the columns."""
  print(f"mutmut on HEAD ({commit[:7]}), one module at a time; left out, as "
        f"they run whole programs: {len(SLOW)} tests "
        "(bench/mutation/targets.py SLOW)")
  print(f"{'module':<16} {'killed':>6} {'timeout':>7} {'survived':>8} "
        f"{'no tests':>8} {'equivalent':>10} {'caught':>8} {'time':>7}  "
        "mutants")


def print_row(row):
  """One module's counts, and its triaged mutants that went against their
  triage."""
  how = (f"{row['mutants']} of {row['of']}, sampled (seed {row['seed']})"
         if row["sampled"] else f"all {row['mutants']}")
  if row.get("cut_at_timeout") or row["unchecked"]:
    how += f", {row['unchecked']} unchecked"
  print(f"{row['module']:<16} {row['killed']:>6} {row['timeout']:>7} "
        f"{row['survived']:>8} {row['no_tests']:>8} {row['equivalent']:>10} "
        f"{row['caught_pct']:>7.1f}% {row['seconds']:>6.0f}s  {how}",
        flush=True)
  for name in row["stale"]:
    print(f"  triaged as killed, yet survives: {name}")
  for name in row["suspect"]:
    print(f"  triaged as equivalent, yet killed (is every test failing "
          f"under mutmut?): {name}")
