"""Stage 4, report: every file's `Rewrite` in, the report's lines out.

One line per finding, by file and line, in the manner of `tf_upgrade_v2`,
then the counts: findings counted by their `Kind` and, for the changes, by
their `Subject` (pmaps, removed calls, call sites moved, steps on the
declared layout, public functions, dead names); a note on waiting in tests
on CPU where a step was written on the module's mesh. Nothing here reads a
message's words.
"""

import collections

from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject

# A global step written without helpers waits for nothing: the program
# needs no wait, its tests on emulated CPU devices may (docs/REWRITE.md).
CPU_WAIT = ("the written program waits for no step (no wait is needed on "
            "real devices): a test running it on emulated CPU devices waits "
            "for each step it does not read (jax.block_until_ready(out)): "
            "many steps with collectives queued unread can abort XLA:CPU's "
            "rendezvous, pmap's program too (docs/REWRITE.md#cpu-wait)")
_KIND = {Kind.CHANGED: "changed", Kind.PERSON: "NEEDS A PERSON",
         Kind.KEPT: "kept", Kind.LEFT: "left"}


def report_lines(results, global_step: bool = False) -> list[str]:
  """The report: one line per finding, by file and line, then the counts
  (with `global_step`, no pointer to the step it already asked for)."""
  lines, counts = [], collections.Counter()
  changed = collections.Counter()  # each subject's changes
  for source, target, rewrite in results:
    if rewrite is None:
      continue
    lines.append(f"{source} -> {target}")
    for finding in rewrite.findings:
      counts[finding.kind] += 1
      if finding.kind == Kind.CHANGED:
        changed[finding.subject] += 1
      lines.append(f"  {source}:{finding.line}: {_KIND[finding.kind]}: "
                   f"{finding.text}")
  pmaps, removed = changed[Subject.PMAP], changed[Subject.REMOVED_CALL]
  placed, declared = changed[Subject.CALL_SITE], changed[Subject.DECLARED]
  public, dead = changed[Subject.PUBLIC], changed[Subject.DEAD]
  # A file the second step could not take holds the first step.
  first_only = sum(1 for _, _, rewrite in results if rewrite and any(
      f.subject == Subject.NOT_GLOBAL for f in rewrite.findings))
  if placed or global_step:
    where = (f"({first_only} file(s) the first step only: the places "
             "above)" if first_only else "to global arrays")
    lines.append(f"{pmaps} pmap(s) rewritten {where}, "
                 + (f"{removed} call(s) jax 0.10 removed rewritten, "
                    if removed else "")
                 + f"{placed} "
                 f"call site(s) moved to global arrays, {counts['person']} "
                 f"place(s) need a person, {counts['kept']} call site(s) "
                 "keep pmap's stacked layout (values made or read per "
                 "device)" + (f", {declared} step(s) on the layout the Port "
                              "declares" if declared else "")
                 + (f", {public} public function(s) now taking or returning "
                    "global arrays (callers in other files: out of view)"
                    if public else "")
                 + (f", {dead} dead local name(s) removed" if dead else ""))
    if any(f.module_mesh for _, _, rewrite in results if rewrite
           for f in rewrite.findings):
      lines.append(CPU_WAIT)
    return lines
  lines.append(f"{pmaps} pmap(s) rewritten, "
               + (f"{removed} call(s) jax 0.10 removed rewritten, "
                  if removed else "")
               + f"{counts['person']} "
               f"place(s) need a person, {counts['kept']} call site(s) keep "
               "pmap's stacked layout (the next step: the state placed once "
               "on the mesh, --global; docs/MIGRATION.md#idiom-map)")
  return lines
