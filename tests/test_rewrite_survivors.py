"""The rewrite's behaviours that mutation testing (`python -m
bench.mutation`) found no fast test pinning; bench/mutation/triage.toml
names the mutant each test kills."""

import libcst as cst
from libcst import metadata

from compare._src.rewrite.read import global_scopes
from compare._src.rewrite import rewrite_helpers
from compare._src.rewrite.read import stacked_calls
from compare._src.rewrite.layouts import S


class _Owns(global_scopes.Scopes):
  """Scopes that records, at each name read, the names the enclosing
  lambdas and comprehensions bind for themselves."""

  def __init__(self):
    super().__init__()
    self.owned = {}

  def visit_Name(self, node):
    self.owned.setdefault(node.value, []).append(
        set().union(*self._own) if self._own else set())


def _scopes(source, cls=global_scopes.Scopes):
  scopes = cls()
  metadata.MetadataWrapper(cst.parse_module(source)).visit(scopes)
  return scopes


TRY = """\
try:
  a = 1
except ValueError:
  b = 2
except KeyError:
  c = 3
else:
  d = 4
finally:
  e = 5
"""


def test_each_block_of_a_try_may_not_run_but_its_finally():
  # Lines 2, 4, 6 and 8: the body, both handlers and the else; `finally`
  # always runs, so it is no such block.
  assert _scopes(TRY).suites == {"<module>": [(2, 2), (4, 4), (6, 6),
                                              (8, 8)]}
  assert _scopes("try:\n  a = 1\nexcept E:\n  b = 2\n").suites == {
      "<module>": [(2, 2), (4, 4)]}


def test_an_if_and_its_else_may_not_run_and_an_elif_is_an_if_of_its_own():
  source = ("if x:\n  a = 1\nelif y:\n  a = 2\n  a = 3\nelse:\n  a = 4\n"
            "while z:\n  w = 1\n")
  scopes = _scopes(source)
  assert sorted(scopes.suites["<module>"]) == [(2, 2), (4, 5), (7, 7)]
  assert scopes.loops == {"<module>": [(8, 9)]}


def test_an_import_binds_a_host_value_under_its_own_or_its_as_name():
  scopes = _scopes("import numpy as np\nfrom jax import lax, tree as t\n"
                   "import os.path\nfrom m import *\nimport json\n")
  assert scopes.assigns == {
      ("<module>", "np"): [global_scopes.Assign(1, 1, S)],
      ("<module>", "lax"): [global_scopes.Assign(2, 2, S)],
      ("<module>", "t"): [global_scopes.Assign(2, 2, S)],
      ("<module>", "json"): [global_scopes.Assign(5, 5, S)]}


def test_a_lambdas_parameters_and_a_comprehensions_targets_are_its_own():
  source = ("f = lambda w, *, k, p=1: w\n"
            "g = lambda q, /: q\n"
            "[i + j for i, (j, *r) in x for [m] in y]\n"
            "{u for u in x}\n{v: 1 for v in x}\n(s for s in x)\n"
            "after\n")
  owned = _scopes(source, _Owns).owned
  assert owned["w"][-1] == {"w", "k", "p"}
  assert owned["q"][-1] == {"q"}
  assert owned["i"][-1] == {"i", "j", "r", "m"}
  assert owned["u"][-1] == {"u"} and owned["v"][-1] == {"v"}
  assert owned["s"][-1] == {"s"}
  assert owned["after"] == [set()]  # each left behind where it ends


# stacked_calls: which calls keep pmap's stacked layout, and what the
# report says of each.


def test_only_flaxs_shard_keeps_the_stack_and_every_named_call_does():
  assert stacked_calls.keeps_stack("common_utils.shard", "shard")
  assert stacked_calls.keeps_stack("flax.training.common_utils.shard",
                                   "shard")
  assert not stacked_calls.keeps_stack("my_data.shard", "shard")
  for tail in stacked_calls.STACKED_CALLS:
    if tail != "shard":
      assert stacked_calls.keeps_stack(f"x.{tail}", tail), tail
  assert not stacked_calls.keeps_stack("jnp.stack", "stack")


def test_flaxs_replicate_is_named_as_imported_either_way():
  assert stacked_calls.is_flax_replicate("replicate")
  assert stacked_calls.is_flax_replicate("flax.jax_utils.replicate")
  assert stacked_calls.is_flax_replicate("jax_utils.replicate")
  assert not stacked_calls.is_flax_replicate("state.replicate")


def test_each_kept_call_is_reported_with_its_own_advice():
  advice = stacked_calls.STACKED_CALLS
  assert stacked_calls.kept("jax_utils.replicate") == (
      "jax_utils.replicate(...): " + advice["replicate"])
  assert stacked_calls.kept("state.replicate") == (
      "state.replicate(...): " + stacked_calls.OWN_REPLICATE)
  assert stacked_calls.kept("common_utils.shard") == (
      "common_utils.shard(...): " + advice["shard"])
  # A call is known by its last name, however deep its module.
  assert stacked_calls.kept("flax.training.common_utils.shard") == (
      "flax.training.common_utils.shard(...): " + advice["shard"])
  # A removed put's helper is reported as what it stands for.
  assert stacked_calls.kept("_pmap_put_replicated") == (
      "_pmap_put_replicated(...): " + advice["replicate"])
  assert stacked_calls.kept("_pmap_put_sharded") == (
      "_pmap_put_sharded(...): " + advice["shard"])


def test_a_removed_put_is_reported_with_the_helper_that_replaces_it():
  assert stacked_calls.removed("jax.device_put_sharded") == (
      "removed in jax 0.10: jax.device_put_sharded(...) -> "
      "_pmap_put_sharded(...): the same stacked array, row i on the i-th "
      "device given (docs/MIGRATION.md#staged)")


def test_the_program_as_it_reads_has_none_of_the_added_helpers():
  body = "import jax\n\nx = 1\n"
  code = (body + rewrite_helpers.HELPERS + rewrite_helpers.STATIC_HELPER
          + rewrite_helpers.PUT_HELPER)
  assert rewrite_helpers.without_helpers(code) == body
  assert rewrite_helpers.without_helpers(body) == body


# global_calls: a parameter given values of two layouts names each.


def test_a_parameter_given_two_layouts_names_each_with_its_line(tmp_path,
                                                                 capsys):
  # pylint: disable=g-import-not-at-top,protected-access
  import re
  from tests import test_rewrite_global_functions as functions
  changes, _ = functions.BLOCKED["a parameter given two layouts"]
  text = functions.SYNCED
  for old, new in changes:
    text = text.replace(old, new)
  code, _, _, out = functions._rewritten(tmp_path, capsys, text)
  assert code == 1, out
  assert re.search(r"show's parameter s is given values of different "
                   r"layouts: replicated at line \d+, stacked at line \d+",
                   out), out


# global_reader: a keyword's name is no read of the variable of that name.


def test_a_keyword_named_like_a_placed_value_is_no_read_of_it(tmp_path,
                                                               capsys):
  # pylint: disable=g-import-not-at-top
  from compare import rewrite
  source = tmp_path / "team.py"
  source.write_text(
      "import jax\nfrom flax import jax_utils\n"
      "from flax.training import common_utils\n\n"
      "def train_step(state, batch):\n"
      "  return state, jax.lax.pmean(batch, 'batch')\n\n"
      "p_step = jax.pmap(train_step, axis_name='batch')\n\n"
      "def log(**kw):\n  return kw\n\n"
      "def run(state, batch):\n"
      "  state = jax_utils.replicate(state)\n"
      "  log(state=1)\n"
      "  return p_step(state, common_utils.shard(batch))\n")
  code = rewrite.main([str(source), "-o", str(tmp_path / "g.py"),
                       "--global"])
  out = capsys.readouterr().out
  assert code == 0 and "0 place(s) need a person" in out, out


def test_orbax_conversion_of_a_replicated_output_takes_it_as_one_value(
    tmp_path, capsys):
  # wmt's `fully_replicated_host_local_array_to_global_array` over the
  # step's params: a read of one value, not a place (the program run is
  # tests/test_rewrite_global_handed.py's, left out of the mutation runs).
  # pylint: disable=g-import-not-at-top,protected-access
  from tests import test_rewrite_global_handed as handed
  code, _, _, out = handed._rewritten(tmp_path, capsys, handed.HANDED)
  assert code == 0 and "0 place(s) need a person" in out, out
