"""`read.names`, unit by unit: dotted names, pmap's aliases and the lines
that use it or a call jax 0.10 removed, a function's own nodes. No
rewrite runs: each test reads a few lines parsed by LibCST."""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import names

SOURCE = """\
from jax import pmap as pm, jit
from jax import pmap
from jax.numpy import pmap as not_jax
from jax import *
import jax


def f(x):
  from jax import pmap as inner
  return pm(x) + jax.pmap(x)


y = jax.device_put_replicated(1, [])
z = jax.device_put_sharded([1], [])
p = pmap
"""


def test_dotted_names_and_the_code_of_a_node():
  assert names.dotted(cst.parse_expression("jax.lax.pmean")) == (
      "jax.lax.pmean")
  assert names.dotted(cst.parse_expression("pmean")) == "pmean"
  # A call or subscript anywhere in it: no dotted name.
  assert names.dotted(cst.parse_expression("f().lax.pmean")) == ""
  assert names.dotted(cst.parse_expression("a[0].b")) == ""
  assert names.code_of(cst.parse_expression("f( a,b )")) == "f( a,b )"


def test_pmaps_aliases_are_the_modules_own_imports_from_jax():
  module = cst.parse_module(SOURCE)
  # Not jax.numpy's, not a star import's, not one made in a function.
  assert names.pmap_aliases(module) == {"pm", "pmap"}
  aliases = {"pm"}
  assert names.is_pmap(cst.parse_expression("pm"), aliases)
  assert names.is_pmap(cst.parse_expression("jax.pmap"), aliases)
  assert not names.is_pmap(cst.parse_expression("jax.jit"), aliases)
  assert not names.is_pmap(cst.parse_expression("pmap"), aliases)


def test_the_lines_that_use_pmap_or_a_removed_call():
  module = metadata.MetadataWrapper(cst.parse_module(SOURCE))
  found = names.References({"pm"})
  module.visit(found)
  # Imports are no use: `pm(x)` and `jax.pmap(x)` at line 10 are; `pmap`
  # at line 15 is no alias here.
  assert found.lines == [10, 10]
  assert found.removed == [13, 14]


def test_a_functions_own_nodes_leave_out_nested_functions_and_lambdas():
  fn = cst.parse_statement(
      "def f(a):\n"
      "  b = g(a)\n"
      "  def inner():\n"
      "    return h(a)\n"
      "  k = lambda: m(a)\n"
      "  return n(b)\n")
  calls = names.own_nodes(fn, cst.Call)
  assert [names.dotted(c.func) for c in calls] == ["g", "n"]
  # The function itself is walked even where it is of `kind`.
  assert names.own_nodes(fn, cst.FunctionDef) == [fn]


def test_nested_functions_are_a_steps_own_defs_not_theirs():
  step = cst.parse_module(
      "def step(s):\n"
      "  def loss_fn(p):\n"
      "    def inner(q):\n"
      "      return q\n"
      "    return inner(p)\n"
      "  f = lambda p: p\n"
      "  def metrics(m):\n"
      "    return m\n"
      "  return loss_fn(s)\n").body[0]
  assert [fn.name.value for fn in names.nested_functions(step)] == [
      "loss_fn", "metrics"]
