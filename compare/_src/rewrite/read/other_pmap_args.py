"""What a flax NNX `nnx.pmap` or equinox `eqx.filter_pmap` call says.

In: the pmap's call (or None for a bare decorator) and its library. Out: an
`OtherStep` (its axis, in_axes, out_axes, function and donation), or the
reason, one clause, why the rewrite leaves it to a person. Only the forms
whose port is known to compute pmap's numbers are read: axes of None and 0
per argument, a string axis name, donation; what changes the layout
otherwise (`nnx.StateAxes`, an axis other than 0, static arguments, given
devices) is named, not guessed.
"""

import ast
import dataclasses

import libcst as cst

from compare._src.rewrite.read.names import code_of
from compare._src.rewrite.read.names import dotted

NNX, EQUINOX = "flax.nnx", "equinox"
# Each library's pmap: its function parameter, the keyword its donation
# goes by (passed to the jit as it is), and what is left to a person.
_FUN = {NNX: "f", EQUINOX: "fun"}
_DONATE = {NNX: "donate_argnums", EQUINOX: "donate"}
_BY_HAND = {
    "static_broadcasted_argnums": "static arguments",
    "devices": "given devices",
    "backend": "a backend",
    "axis_size": "an axis size with no devices to build a mesh from",
    "transform_metadata": "transform metadata",
    "graph": "graph=",
    "graph_updates": "graph_updates=",
}
# An axis the rewrite writes for a pmap that names none (no collective can
# name it).
UNNAMED = "devices"


@dataclasses.dataclass(frozen=True)
class OtherStep:
  """One `nnx.pmap` / `eqx.filter_pmap` the rewrite ports.

  Attributes:
    library: `NNX` or `EQUINOX`.
    axis: the mesh axis (pmap's `axis_name`, or `UNNAMED`).
    in_axes: None, 0, or a tuple of them, one per positional argument.
    out_axes: None, 0, or a tuple of them, one per output.
    fun: the pmapped function of a call (`nnx.pmap(f, ...)`), or None for
      a decorator.
    donate: the donation keyword, passed to the jit as written, or None.
  """

  library: str
  axis: str
  in_axes: object
  out_axes: object
  fun: cst.BaseExpression | None = None
  donate: cst.Arg | None = None

  def spec(self, axes) -> str:
    """The `in_specs` / `out_specs` source for `axes`: `None` -> `P()`,
    `0` -> `P(axis)`, a tuple -> a tuple of those."""
    if axes is None:
      return "jax.P()"
    if axes == 0:
      return f'jax.P("{self.axis}")'
    inner = ", ".join(self.spec(a) for a in axes)
    return f"({inner},)" if len(axes) == 1 else f"({inner})"

  def mapped(self, count: int) -> list[bool]:
    """Which of `count` positional arguments are mapped (in_axes 0)."""
    if isinstance(self.in_axes, tuple):
      return [a == 0 for a in self.in_axes]
    return [self.in_axes == 0] * count


def _axes(node, what: str, line: int):
  """`node`'s axes (None, 0, a flat tuple of them), or the reason not."""
  if node is None:
    return 0  # both libraries map every argument and output by default
  text = code_of(node)
  if "StateAxes" in text:
    return (f"{what} holds nnx.StateAxes (line {line}): pmap gives each "
            "device its slice of that state without the stacked axis, "
            "nnx.shard_map's StateSharding a block that keeps it: port it "
            "by hand (docs/MORE-IDIOMS.md#nnx)")
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return (f"{what}={text} (line {line}) is not None, 0 or a tuple of "
            "them: port it by hand")
  if isinstance(value, list):
    value = tuple(value)
  flat = value if isinstance(value, tuple) else (value,)
  if any(a is not None and (a != 0 or isinstance(a, bool)) for a in flat):
    return (f"{what}={text} (line {line}): only axes None and 0 become "
            "specs (P() and P(axis)); port it by hand")
  return value


def read(call: cst.Call | None, library: str, line: int, name: str
         ) -> "OtherStep | str":
  """The step `call` makes, or why the rewrite leaves it to a person.

  Args:
    call: the pmap's call (`nnx.pmap(f, axis_name=...)`, or the decorator
      `@nnx.pmap(axis_name=...)`); None for a bare `@nnx.pmap`.
    library: `NNX` or `EQUINOX`.
    line: where, for the messages.
    name: the pmap as the file writes it, for the messages.
  """
  args = () if call is None else call.args
  fun, keywords = None, {}
  for arg in args:
    if arg.star:
      return f"{name} with *args or **kwargs (line {line}): port it by hand"
    if arg.keyword is None:
      if fun is not None:
        return (f"{name} with more than one positional argument "
                f"(line {line}): port it by hand")
      fun = arg.value
    else:
      keywords[arg.keyword.value] = arg
  if _FUN[library] in keywords:
    fun = keywords.pop(_FUN[library]).value
  for keyword in keywords:
    if keyword in _BY_HAND:
      return (f"{name} with {_BY_HAND[keyword]} ({keyword}, line {line}): "
              "the rewrite ports a pmap of every local device with no "
              "static argument; port it by hand")
    if keyword not in ("axis_name", "in_axes", "out_axes", _DONATE[library]):
      return f"{name} with {keyword}= (line {line}): port it by hand"
  axis = UNNAMED
  if "axis_name" in keywords:
    value = keywords["axis_name"].value
    if not isinstance(value, cst.SimpleString):
      return (f"{name}'s axis_name (line {line}) is not a string: the mesh "
              "names its axis; give it the name")
    axis = ast.literal_eval(value.value)
  in_axes = _axes(keywords.get("in_axes") and keywords["in_axes"].value,
                  "in_axes", line)
  out_axes = _axes(keywords.get("out_axes") and keywords["out_axes"].value,
                   "out_axes", line)
  for axes in (in_axes, out_axes):
    if isinstance(axes, str):
      return axes
  return OtherStep(library, axis, in_axes, out_axes, fun,
                   keywords.get(_DONATE[library]))


def split_rngs_line(decorators, position) -> int | None:
  """The line of an `nnx.split_rngs` among `decorators`, or None."""
  for decorator in decorators:
    node = decorator.decorator
    node = node.func if isinstance(node, cst.Call) else node
    if dotted(node).endswith("split_rngs"):
      return position(decorator).start.line
  return None
