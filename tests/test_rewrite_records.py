"""The writer's records of each port agree with what it wrote (issue 73).

`--prove` reads each written port's name, function and axes from the
writer's `records.Port`, not from the written text: a record that says
otherwise than the code proves another step. Each record here is checked
against the code written beside it, parsed: its port (the template with the
function in) is in the code, bound to the recorded name; its `_pmap_view`
axes (the helpers) or its out_specs (no helper) are the recorded ones.
"""

import ast
import dataclasses
import functools
import pathlib

import pytest

from compare._src.rewrite import pipeline
from compare._src.rewrite.write import rewrite_pmap

ROOT = pathlib.Path(__file__).resolve().parents[1]
INPUTS = ROOT / "tests" / "rewrite_inputs"
# The first step (named, local and decorated pmaps, partials), and
# --global without helpers (a pmap made inside a function).
CASES = [("tutorial_linear_regression.py", False),
         ("local_pmap_train.py", True), ("call_forms.py", False)]


def _axes_of_specs(spec: ast.expr, count: int) -> tuple:
  """pmap's axes of `count` values a written spec lays out."""
  specs = spec.elts if isinstance(spec, ast.Tuple) else [spec] * 2
  return tuple(None if not s.args else 0 for s in specs)[:max(count, 2)]


def _names(code: str) -> set:
  """Every name an expression's source names: variables, attributes and
  keyword arguments."""
  return {getattr(n, "id", None) or getattr(n, "attr", None)
          or getattr(n, "arg", None) for n in ast.walk(ast.parse(
              code, mode="eval")) if isinstance(
                  n, (ast.Name, ast.Attribute, ast.keyword))}


def _keywords(node: ast.AST, func: str) -> dict:
  """The keywords of the first call of `func` in `node`, as source."""
  call = next(n for n in ast.walk(node) if isinstance(n, ast.Call)
              and ast.unparse(n.func) == func)
  return {k.arg: k.value for k in call.keywords}


def _bound(code: ast.Module, name: str) -> ast.AST:
  """What the module binds to `name`: an assignment's value, or a
  decorated function's decorators."""
  for node in code.body:  # the first step writes `def f` then `f = ...`
    if isinstance(node, ast.Assign) and [
        getattr(t, "id", None) for t in node.targets] == [name]:
      return node.value
  for node in code.body:
    if isinstance(node, ast.FunctionDef) and node.name == name:
      return ast.Module([ast.Expr(d) for d in node.decorator_list], [])
  raise AssertionError(f"{name} is bound to nothing in the code")


def check(rewrite) -> int:
  """Asserts every port's record agrees with the code; returns how many
  ports it checked."""
  code = ast.parse(rewrite.code)
  dumps = {ast.dump(n) for n in ast.walk(code) if isinstance(n, ast.expr)}
  for port in rewrite.ports:
    written = (ast.parse(port.template.replace(rewrite_pmap.FUN,
                                               port.fun_code), mode="eval")
               .body if port.template else None)
    assert written is None or ast.dump(written) in dumps, port
    assert port.mapped == _names(port.fun_code), port
    if port.name is not None:
      place = _bound(code, port.name)
      assert written is None or ast.dump(written) == ast.dump(place), port
      written = place
    call = _keywords(written, "_pmap_call") if "_pmap_call" in (
        rewrite.defined) else {}
    assert ast.literal_eval(call.get("static_argnums", "()")) == port.static
    assert (ast.unparse(call["devices"]) if "devices" in call else None) == (
        None if port.devices is None else f"tuple({port.devices})"), port
    if "_pmap_call" in rewrite.defined:
      view = _keywords(written, "_pmap_view")
      assert (ast.literal_eval(view["in_axes"]),
              ast.literal_eval(view["out_axes"])) == (port.in_axes,
                                                      port.out_axes), port
    specs = _keywords(written, "jax.shard_map")
    assert ast.unparse(specs["in_specs"]) == ast.unparse(ast.parse(
        port.in_specs, mode="eval").body), port
    assert ast.unparse(specs["out_specs"]) == ast.unparse(ast.parse(
        port.out_specs, mode="eval").body), port
    if "_pmap_call" not in rewrite.defined:
      assert _axes_of_specs(specs["out_specs"], 2) == port.out_axes, port
  return len(rewrite.ports)


@functools.cache
def _rewrite(name: str, global_step: bool):
  text = (INPUTS / name).read_text()
  return (pipeline.rewrite_global_source if global_step
          else pipeline.rewrite_source)(text, name)


@pytest.mark.parametrize("name,global_step", CASES)
def test_each_recorded_port_is_the_written_one(name, global_step):
  rewrite = _rewrite(name, global_step)
  assert check(rewrite) >= 1
  assert bool(rewrite.defined) == (not rewrite.mesh_after_join)


def test_a_record_of_another_axis_is_seen():
  # The negative control: a record that says the step's outputs are one
  # value where the code keeps them per device.
  rewrite = _rewrite("local_pmap_train.py", True)
  port = rewrite.ports[0]
  flipped = tuple(0 if a is None else None for a in port.out_axes)
  planted = dataclasses.replace(rewrite, ports=(dataclasses.replace(
      port, out_axes=flipped),))
  with pytest.raises(AssertionError):
    check(planted)
