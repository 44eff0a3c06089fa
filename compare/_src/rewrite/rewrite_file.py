"""One file rewritten: parse, rewrite every pmap, add the helpers, report.

`rewrite_source` is the whole rewrite of one source text; the CLI
(`compare._src.rewrite.rewrite_cli`) reads and writes the files.
"""

import dataclasses

import libcst as cst
from libcst import metadata

from compare._src.rewrite import rewrite_helpers
from compare._src.rewrite import rewrite_pmap
from compare._src.rewrite import stacked_calls
from compare._src.rewrite.findings import Finding
from compare._src.rewrite.findings import Kind


class RewriteError(ValueError):
  """Input the rewrite cannot take (one line, exit 2)."""


@dataclasses.dataclass(frozen=True)
class Rewrite:
  """A file's rewrite.

  Attributes:
    code: the rewritten source (the input itself where nothing changed).
    findings: every change, every place left to a person and every call
      site that keeps pmap's stacked layout, in line order.
    ports: every pmap rewritten, with its port's source.
  """

  code: str
  findings: tuple[Finding, ...]
  ports: tuple[rewrite_pmap.Port, ...] = ()

  @property
  def needs_a_person(self) -> bool:
    return any(f.kind == Kind.PERSON for f in self.findings)


def pmap_aliases(module) -> set[str]:
  """Names bound to jax.pmap by `from jax import pmap [as NAME]`."""
  aliases = set()
  for statement in module.body:
    if not isinstance(statement, cst.SimpleStatementLine):
      continue
    for small in statement.body:
      if (isinstance(small, cst.ImportFrom) and small.module is not None
          and rewrite_pmap.dotted(small.module) == "jax"
          and not isinstance(small.names, cst.ImportStar)):
        for alias in small.names:
          if alias.name.value == "pmap":
            aliases.add(alias.asname.name.value if alias.asname else "pmap")
  return aliases


class _References(cst.CSTVisitor):
  """The lines where jax.pmap (or an alias) appears at all."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,)

  def __init__(self, aliases):
    super().__init__()
    self.aliases, self.lines = aliases, []
    self.removed = []  # lines naming a call jax 0.10 removed

  def _add(self, node):
    if rewrite_pmap.is_pmap(node, self.aliases):
      self.lines.append(
          self.get_metadata(metadata.PositionProvider, node).start.line)
    elif rewrite_pmap.dotted(node) in stacked_calls.REMOVED_PUTS:
      self.removed.append(
          self.get_metadata(metadata.PositionProvider, node).start.line)

  def visit_Attribute(self, node):
    self._add(node)

  def visit_Name(self, node):
    self._add(node)

  def visit_ImportFrom(self, node):
    return False  # `from jax import pmap` is not a use


def with_imports(code: str, module: cst.Module, static: bool,
                 put: bool = False) -> str:
  """`code` with the helpers' imports and the helpers after the imports."""
  have = {cst.Module([]).code_for_node(s).strip() for s in module.body
          if isinstance(s, cst.SimpleStatementLine)}
  needed = [line for line in ("import functools", "import jax",
                              "import numpy as np") if line not in have]
  lines = code.splitlines(keepends=True)
  last = 0
  for i, line in enumerate(lines):
    if line.startswith(("import ", "from ")) and not line.startswith(
        "from __future__"):
      last = i + 1
  head = "".join(lines[:last])
  if needed:
    head += "".join(f"{line}  # compare.rewrite's helpers\n"
                    for line in needed)
  helpers = (rewrite_helpers.HELPERS
             + (rewrite_helpers.STATIC_HELPER if static else "")
             + (rewrite_helpers.PUT_HELPER if put else ""))
  return head + helpers + "".join(lines[last:])


def with_mesh(code: str, module: cst.Module, block: str,
              functools: bool) -> str:
  """`code` with the imports the global step names and its module-level
  mesh (`block`) after the file's imports."""
  have = {cst.Module([]).code_for_node(s).strip() for s in module.body
          if isinstance(s, cst.SimpleStatementLine)}
  needed = [line for line in (("import functools",) if functools else ())
            + ("import jax",) if line not in have]
  lines = code.splitlines(keepends=True)
  last = max((i + 1 for i, line in enumerate(lines) if line.startswith(
      ("import ", "from ")) and not line.startswith("from __future__")),
             default=0)
  return ("".join(lines[:last]) + "".join(f"{line}\n" for line in needed)
          + ("\n" + block if block else "") + "".join(lines[last:]))


def rewrite_source(source: str, path: str = "<string>") -> Rewrite:
  """Rewrites every `jax.pmap` of one Python source.

  Args:
    source: the file's text.
    path: its name, for the messages.

  Returns:
    The `Rewrite`.

  Raises:
    RewriteError: `source` is not Python, or has no pmap.
  """
  try:
    module = cst.parse_module(source)
  except cst.ParserSyntaxError as err:
    raise RewriteError(f"{path} is not Python: line {err.raw_line}: "
                       f"{err.message}") from None
  aliases = pmap_aliases(module)
  wrapper = metadata.MetadataWrapper(module)
  references = _References(aliases)
  wrapper.visit(references)
  if not references.lines and not references.removed:
    raise RewriteError(f"{path}: no jax.pmap found" + (
        " (it is the first step's output: --global takes the second)"
        if "_pmap_call(" in source else ""))
  rewriter = rewrite_pmap.PmapRewriter(aliases, path)
  new = wrapper.visit(rewriter)
  findings = list(rewriter.findings)
  seen = {f.line for f in findings if f.kind in (Kind.CHANGED, Kind.PERSON)}
  findings += [Finding(line, Kind.PERSON, "jax.pmap used as a value (not "
                       "called or a decorator): rewrite it by hand")
               for line in sorted(set(references.lines) - seen)]
  findings += [Finding(line, Kind.PERSON, "a function jax 0.10 removed, used "
                       "as a value (not called): replace it by hand "
                       "(docs/MIGRATION.md#staged)")
               for line in sorted(set(references.removed) - seen)]
  code = (with_imports(new.code, module, rewriter.uses_static,
                       rewriter.uses_put)
          if rewriter.changed or rewriter.uses_put else source)
  return Rewrite(code, tuple(sorted(findings, key=lambda f: f.line)),
                 tuple(rewriter.ports))
