"""The row of a file `python -m compare.rewrite --global` wrote: its lines,
the diff's, the `_pmap_` names and waits it added, and what the run said
(pmaps rewritten, places left, `--prove`'s verdict and all-reduces).

Shared by the `--global` table's runners
(bench/runners/rewrite_global_runs.py and
bench/runners/rewrite_global_flax.py), so neither imports the other's
module.
"""

import difflib
import io
import re
import tokenize


def code_lines(text: str) -> int:
  """Lines holding code: no blank line, comment or docstring (a string
  that is a statement of its own)."""
  lines, statement_start = set(), True
  for token in tokenize.generate_tokens(io.StringIO(text).readline):
    if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT,
                      tokenize.DEDENT, tokenize.ENDMARKER):
      continue
    if token.type == tokenize.NEWLINE:
      statement_start = True
      continue
    if not (token.type == tokenize.STRING and statement_start):
      lines.update(range(token.start[0], token.end[0] + 1))
    statement_start = False
  return len(lines)


def written(before: str, after: str, done, port) -> dict:
  """What `compare.rewrite --global` (its run `done`) wrote over `before`:
  lines, a diff's lines added and removed, `_pmap_` names, waits added,
  pmaps rewritten, places left, `--prove`'s verdict and the all-reduces a
  step runs in its table."""
  diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(),
                                   lineterm="", n=0))
  return {"diff": "\n".join(diff[2:]),
          "pmaps": len(re.findall(r": changed: pmap over", done.stdout)),
          "exit": done.returncode,
          "lines_before": len(before.splitlines()),
          "lines_after": len(after.splitlines()),
          "code_lines_before": code_lines(before),
          "code_lines_after": code_lines(after),
          "added": sum(1 for l in diff
                       if l.startswith("+") and not l.startswith("+++")),
          "removed": sum(1 for l in diff
                         if l.startswith("-") and not l.startswith("---")),
          "pmap_names": len(re.findall(r"\b_pmap_\w+", after)),
          "waits_added": after.count("block_until_ready")
                         - before.count("block_until_ready"),
          "prove": (re.findall(r"^verdict: (\w+)", done.stdout, re.M)
                    or ["-" if not port else "none"])[-1],
          # The proof table's all-reduces a step runs (the column after
          # ex/s, min-max and five more).
          "prove_reduces": dict(re.findall(
              r"^(pmap|port)\s+\S+\s+\S*\d-\d\S*(?:\s+\S+){4}\s+(\S+)",
              done.stdout, re.M)),
          "left": len(re.findall(r": left: ", done.stdout))}
