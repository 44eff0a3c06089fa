"""Another library's pmap in a file with no `jax.pmap`: where, and what to do.

In: a parsed module. Out: `OtherPmap`s, each a use of a pmap that is not
`jax.pmap` (flax NNX's `nnx.pmap`, equinox's `filter_pmap`, any other
`*.pmap`), with its line, so that a file that has a pmap is never told it
has none. A file whose pmaps are all flax NNX's or equinox's is ported
(`write.other_pmaps_file`); `advice` is the way to port one by hand where
it is not (an unknown library's, or one beside a `jax.pmap`).
"""

import dataclasses

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read.names import dotted

# The libraries' own pmaps, by the module a file imports them from: what
# each becomes, and where the guide ports one.
_KNOWN = {
    "flax.nnx": ("flax NNX's nnx.pmap", "nnx.shard_map under nnx.jit",
                 "docs/MORE-IDIOMS.md#nnx, examples/nnx_mlp"),
    "equinox": ("equinox's filter_pmap", "eqx.filter_jit over "
                "jax.shard_map", "docs/MORE-IDIOMS.md#equinox-step, "
                "examples/equinox_mlp"),
}


@dataclasses.dataclass(frozen=True)
class OtherPmap:
  """One use of a pmap the rewrite does not take.

  Attributes:
    name: as the file writes it (`nnx.pmap`, `eqx.filter_pmap`).
    line: where.
    library: the module it comes from (`flax.nnx`, `equinox`), or "" where
      the file does not import it in a way read here.
  """

  name: str
  line: int
  library: str

  def advice(self) -> str:
    """What to do with it, in one clause."""
    known = _KNOWN.get(self.library)
    if known is None:
      return (f"{self.name} (line {self.line}) is not jax.pmap, which is "
              "all the rewrite takes")
    what, becomes, where = known
    return (f"it calls {what} ({self.name}, line {self.line}), which the "
            f"rewrite does not take yet: port it by hand to {becomes} "
            f"({where}) and prove it with compare.prove")


class _Imports(cst.CSTVisitor):
  """Local names bound to the libraries of `_KNOWN` (`from flax import
  nnx`, `import equinox as eqx`, `from equinox import filter_pmap`)."""

  def __init__(self):
    self.bound = {}  # local name -> library: `nnx`, `eqx`
    self.pmaps = {}  # local name -> library: a pmap imported by name

  def visit_Import(self, node: cst.Import) -> None:
    for alias in node.names:
      name = dotted(alias.name)
      if name in _KNOWN:
        local = alias.asname.name.value if alias.asname else name
        self.bound[local] = name

  def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
    if node.module is None or isinstance(node.names, cst.ImportStar):
      return
    module = dotted(node.module)
    for alias in node.names:
      full = f"{module}.{alias.name.value}"
      local = alias.asname.name.value if alias.asname else alias.name.value
      if full in _KNOWN:
        self.bound[local] = full
      elif module in _KNOWN and alias.name.value.endswith("pmap"):
        self.pmaps[local] = module


class _Uses(cst.CSTVisitor):
  """Every attribute called `pmap` or `*_pmap`, and every name a library's
  pmap is imported as, with its line."""

  METADATA_DEPENDENCIES = (metadata.PositionProvider,)

  def __init__(self, imports):
    self.bound, self.pmaps, self.found = imports.bound, imports.pmaps, []

  def _record(self, node, name):
    line = self.get_metadata(metadata.PositionProvider, node).start.line
    library = (self.pmaps.get(name) or self.bound.get(name.split(".")[0])
               or "")
    base = name.rsplit(".", 1)[0]
    if not library and base in _KNOWN:  # written in full: flax.nnx.pmap
      library = base
    self.found.append(OtherPmap(name, line, library))

  def visit_Import(self, node: cst.Import) -> bool:
    del node
    return False  # an import binds a name; a use calls it

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    del node
    return False

  def visit_Attribute(self, node: cst.Attribute) -> bool:
    name = dotted(node)
    if name and name != "jax.pmap" and (node.attr.value == "pmap"
                 or node.attr.value.endswith("_pmap")):
      self._record(node, name)
      return False
    return True

  def visit_Name(self, node: cst.Name) -> None:
    if node.value in self.pmaps:
      self._record(node, node.value)


def find(module: cst.Module) -> list[OtherPmap]:
  """The uses of another library's pmap in `module`, in file order."""
  imports = _Imports()
  module.visit(imports)
  uses = _Uses(imports)
  metadata.MetadataWrapper(module).visit(uses)
  return uses.found
