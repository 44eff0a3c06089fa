"""The layouts' names read, planned and written: `R`, `B`, `S`, `Blocker`,
`StepLayout` (shared by `read`, `plan` and `write`)."""

import dataclasses

R, B, S = "replicated", "global batch", "stacked"
CONFLICT = "conflict"  # a name of two layouts: already a `Blocker`
CYCLE = "cycle"  # a binding met again while read: the others decide


@dataclasses.dataclass(frozen=True)
class Blocker:
  """A place the global step cannot take: its line and why."""

  line: int
  text: str


@dataclasses.dataclass
class StepLayout:
  """One pmapped step: its line, name, and each mapped argument's and
  output's layout (`R`, `B` or `S`; None where the program never says);
  its static arguments have none."""

  line: int
  name: str
  args: list = dataclasses.field(default_factory=list)
  outs: list | None = None
  calls: list = dataclasses.field(default_factory=list)
  static: tuple = ()  # static_broadcasted_argnums: Python values, no layout
