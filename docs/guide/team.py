"""The team programs' table (`<!-- table: team-programs -->`): every
program of examples/team_programs, its correct port, its wrong ports and
the planted 1% changes, from one run of `python -m docs.team_programs`
(docs/measured/team_programs.json)."""

from docs.guide.jobs import load
from docs.guide.tables import markdown_table

NAME = "team_programs"


def _step(entry):
  """A run that must fail: the step it failed at, or what it did."""
  if entry["verdict"] == "fail" and entry["first_fail_step"]:
    return str(entry["first_fail_step"])
  return f"{entry['verdict']} (should fail)"


def _judged(entry):
  text = f"{entry['judged_leaves']} of {entry['leaves']}"
  if entry["unjudged_leaves"]:
    text += "; not judged: " + ", ".join(
        f"`{leaf}`" for leaf in entry["unjudged_leaves"])
  return text


def team_programs_table(root):
  """A row a program: the correct port's verdict and the leaves it judged,
  each wrong port with the step it failed at, the plants' steps."""
  record = load(root, NAME)
  late = record["late_step"]
  controls = ("update-1pct-at:1", f"update-1pct-at:{late}",
              f"update-1pct-from:{late}")
  rows = []
  for name, runs in record["programs"].items():
    correct = runs["correct"]
    planted = [label for label in runs if label.startswith("update-1pct")]
    wrong = [f"{label} {_step(entry)}" for label, entry in runs.items()
             if label != "correct" and label not in planted]
    rows.append([f"`{name}`", correct["verdict"], _judged(correct),
                 ", ".join(wrong),
                 *(_step(runs[label]) + ("" if label == column else
                                         f" (`{label}`)")
                   for label, column in zip(planted, controls))])
  head = ["program", "correct port", "leaves judged",
          "wrong ports: failed at step", "1% at step 1",
          f"1% at step {late} only", f"1% from step {late}"]
  return markdown_table(head, rows, ["l", "l", "l", "l", "r", "r", "r"])
