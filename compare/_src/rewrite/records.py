"""The records the stages hand on: findings, ports, a file's rewrite.

A `Finding` is a kind, a subject and a message; a `Port` a pmap rewritten;
a `Rewrite` a file's code, findings and ports; `RewriteError` input the
rewrite cannot take.

What comes in: nothing (every stage makes findings). What goes out: the
types the stages hand on. The report counts findings by their `kind` and
`subject`, never by their words, so rewording a message changes no count
and no behaviour (as `tf_upgrade_v2` logs each change as a typed record).
"""

import dataclasses
import enum


class Kind(enum.StrEnum):
  """What happened at a place: the report's word for it (`str`-valued, so
  `finding.kind == "person"` reads as before)."""

  CHANGED = "changed"  # rewritten
  PERSON = "person"  # left as written: it needs a person
  KEPT = "kept"  # pmap's stacked layout kept at a call site: the next step
  LEFT = "left"  # written, and something stale named for a person


class Subject(enum.Enum):
  """What a finding is about: the report counts each subject apart."""

  CALL_SITE = "call site"  # a placement or read moved to global arrays
  PMAP = "pmap"  # a pmap rewritten into jax.jit(jax.shard_map(...))
  REMOVED_CALL = "removed call"  # a call jax 0.10 removed, rewritten
  DECLARED = "declared"  # a step given the layout the Port declares
  PUBLIC = "public"  # a public function now taking global arrays
  DEAD = "dead"  # a dead local name removed
  AXES = "axes"  # the pmaps name several axes: which one placements name
  NOT_GLOBAL = "not global"  # the global step not written: the first is


@dataclasses.dataclass(frozen=True)
class Finding:
  """One line of the report.

  Attributes:
    line: the line in the input file.
    kind: a `Kind`: changed, person, kept or left.
    text: what was done, or why not (for a person; nothing reads it).
    subject: what it is about (`Subject`), which the report counts.
    module_mesh: a pmap written on the module's own mesh (no helper, no
      wait): the report adds the note on waiting in tests on CPU.
  """

  line: int
  kind: Kind
  text: str
  subject: Subject = Subject.CALL_SITE
  module_mesh: bool = False

  def __post_init__(self):
    # A plain string kind ("person") is taken as its `Kind`.
    object.__setattr__(self, "kind", Kind(self.kind))


@dataclasses.dataclass(frozen=True)
class Port:
  """A pmap rewritten, as its writer wrote it: what `--prove` reads instead
  of parsing the written file (`proof.rewrite_proof`).

  Attributes:
    line: the pmap's line in the input file.
    fun_code: the mapped function's source.
    template: the port's source with `FUN` in place of the function
      (empty for a decorator the global step writes as decorators).
    name: the module-level name the written step is bound to (an assigned
      pmap's target, a decorated function's name); None for a pmap made
      inside a function, which the proof finds by `mapped`.
    mapped: every name the mapped function's expression names (`f`, or
      `functools.partial(f, ...)`'s), which the proof matches against the
      Port's function.
    in_axes: the step's arguments as pmap's axes the proof hands it: 0
      stacked `[devices, ...]` (pmap's view kept), None one value (the
      state placed once, the global batch).
    out_axes: its outputs so: 0 per device, None one value.
    in_specs: the `in_specs` written (source).
    out_specs: the `out_specs` written (source).
    after_two: the parameters the written step's lambda takes after the
      Port's `(state, batch)`: the keyword arguments the program's calls
      pass, by position now (`write.global_keywords`); () for most steps.
    devices: the source of pmap's `devices` argument, or None.
    static: pmap's `static_broadcasted_argnums`, jit's `static_argnums`.
  """

  line: int
  fun_code: str
  template: str
  name: str | None = None
  mapped: frozenset[str] = frozenset()
  in_axes: object = None
  out_axes: object = None
  in_specs: str = ""
  out_specs: str = ""
  after_two: tuple[str, ...] = ()
  devices: str | None = None
  static: tuple[int, ...] = ()

  @property
  def axes(self) -> dict:
    """`{"in_axes": ..., "out_axes": ...}`, as the proof's adapters take
    them."""
    return {"in_axes": self.in_axes, "out_axes": self.out_axes}


class RewriteError(ValueError):
  """Input the rewrite cannot take (one line, exit 2)."""


class NoPmapFound(RewriteError):
  """A file with no `jax.pmap` in it: a tree's file to copy as it is, or,
  where it has another library's pmap (`other`), a file to port by hand.

  Attributes:
    other: the uses of another library's pmap (`read.other_pmaps`).
  """

  def __init__(self, message: str, other=()):
    super().__init__(message)
    self.other = tuple(other)


@dataclasses.dataclass(frozen=True)
class Rewrite:
  """A file's rewrite.

  Attributes:
    code: the rewritten source (the input itself where nothing changed).
    findings: every change, every place left to a person and every call
      site that keeps pmap's stacked layout, in line order.
    ports: every pmap rewritten, with its port's source and layout.
    defined: the module-level names the writer added (the first step's
      `_pmap_*` helpers, or the global step's mesh and shardings).
    mesh_after_join: the global step sets jax's mesh after the file's
      `jax.distributed.initialize` (its shard_maps name no mesh).
    other_library: the file's pmaps were another library's (flax NNX's,
      equinox's: `write.other_pmaps_file`), which `--prove` does not take.
  """

  code: str
  findings: tuple[Finding, ...]
  ports: tuple[Port, ...] = ()
  defined: tuple[str, ...] = ()
  mesh_after_join: bool = False
  other_library: bool = False

  @property
  def needs_a_person(self) -> bool:
    return any(f.kind == Kind.PERSON for f in self.findings)
