"""The `--global` reading of the program's own functions (parameters and
their defaults, returns, replace and dict layouts, step factories, the
depth bound) that only slow tests had pinned, found by `python -m
bench.mutation` running global_calls in full (issue 60): each a small
program rewritten in-process, no program run (bench/mutation/triage.toml
names the mutant each test kills)."""

import pytest

from tests.test_rewrite_mutation_units import BOTH_PLACED
from tests.test_rewrite_mutation_units import _changed
from tests.test_rewrite_mutation_units import _findings
from tests.test_rewrite_mutation_units import _people


@pytest.mark.parametrize("default", ["True", "False"])
def test_a_parameters_default_of_true_or_false_is_a_value_of_no_layout(
    default):
  # global_calls._default_kind: a call that leaves `flag` to its default
  # gives it a value of no layout ("stacked" in the report), beside a call
  # that gives it the replicated state.
  people = _people(_findings(
      f"def go(state, batch, flag={default}):\n"
      "  return p_step(state, common_utils.shard(batch))\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = go(state, batch)\n  m2 = go(state, batch, flag=state)\n"
      "  return m, m2\n"))
  assert ("go's parameter flag is given values of different layouts: "
          "replicated at line 17, stacked at line 16; give it one layout"
          in " ".join(people)), people


def test_a_parameters_default_of_a_name_is_out_of_view_beside_a_literal():
  # `state=STATE` left to its default: where it comes from is not in view,
  # whatever the next parameter's literal default (global_calls.
  # _default_kind reads the parameter's own default only).
  people = _people(_findings(
      "STATE = None\n\ndef go(batch, state=STATE, n=3):\n"
      "  return p_step(state, common_utils.shard(batch))\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = go(batch)\n  m2 = go(batch, state)\n  return m, m2\n"))
  assert any("argument 0 of p_step, `state`: where it comes from is not in "
             "view (a parameter of go, or unbound here)" in text
             for text in people), people
  # Not of no layout ("stacked"), as `n`'s literal would make it.
  assert not any("parameter state is given values of different layouts"
                 in text for text in people), people


def test_a_replace_of_two_layouts_is_named_with_both():
  # global_calls.replace_kind's blocker, word for word.
  people = _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  s = state.replace(step=0)\n"
      "  m = p_step(s, common_utils.shard(batch))\n  return m\n"))
  assert ("global step not written: state.replace(...) puts values of other "
          "layouts together (replicated and ['stacked']): place them alike "
          "by hand (docs/MIGRATION.md#idiom-map)") in people, people


def test_a_function_returning_a_placed_value_used_as_a_value_is_named():
  # global_calls._returned_to_names, word for word.
  people = _people(_findings(
      "def make(state):\n  return jax_utils.replicate(state)\n\n"
      "def run(state, batch):\n  states = list(map(make, [state]))\n"
      "  s = make(state)\n  m = p_step(s, common_utils.shard(batch))\n"
      "  return m\n"))
  assert ("global step not written: make returns a replicated value (line "
          "12) and is used here as a value: call it as `x = make(...)` so "
          "that it can be followed (docs/REWRITE.md#functions)") in people, (
              people)


def test_a_steps_output_given_to_a_functions_star_args_is_read_per_device():
  # `show(0, m)` into `def show(a, *rest)`: the output lands in no named
  # parameter (global_calls.parameter_of: None), so it is not followed
  # and keeps pmap's stacked view; no crash on the index past the names.
  findings = _findings(
      "def show(a, *rest):\n  print(a)\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n  show(0, m)\n"
      "  return jax_utils.unreplicate(m)\n")
  assert not _people(findings)
  assert f"{BOTH_PLACED}, out_specs jax.P('batch')," in _changed(findings)


def test_a_dict_of_two_layouts_is_named_with_both():
  # global_calls.structure_kind's blocker, word for word.
  people = _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  b = common_utils.shard(batch)\n  d = {'a': state, 'b': b}\n"
      "  m = p_step(d['a'], b)\n  return m\n"))
  assert ("global step not written: a dict of values of different layouts "
          "(['global batch', 'replicated']): place them alike by hand "
          "(docs/MIGRATION.md#idiom-map)") in people, people


def test_a_replace_of_a_value_of_no_layout_is_of_none():
  # `create().replace(step=0)` (global_calls.replace_kind: S, neither
  # placed): given to the step, it keeps pmap's per-device view.
  findings = _findings(
      "def run(batch):\n  t = create()\n  s = t.replace(step=0)\n"
      "  m = p_step(s, common_utils.shard(batch))\n  return m\n")
  assert not _people(findings)
  assert ("in_specs jax.P('batch'), out_specs jax.P(), check_vma at jax's "
          "default (the step takes no gradient); pmap's per-device view of "
          "its argument 0") in _changed(findings)


def _chain(n, replaced):
  """A replicated state aliased `n` times, then `.replace`d: of the alias
  (`replaced="base"`) or with it as the value (`"value"`)."""
  aliases = "".join(f"  a{i + 1} = a{i}\n" for i in range(n))
  last = (f"a{n}.replace(metrics=m)" if replaced == "base" else
          f"state.replace(params=a{n})")
  return _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n  a0 = state\n"
      + aliases + f"  s = {last}\n  return jax_utils.unreplicate(s)\n"))


def test_a_replace_is_followed_to_the_readings_depth_and_no_further():
  # The reading follows a name through a bounded number of bindings
  # (`depth > 8`, global_calls.replace_kind handing on depth + 1): where a
  # replace's value or base lies past it, its layout is not in view. Each
  # pair is the last chain within and the first past the bound, as
  # measured; a bound moved by one moves them.
  def conflicts(people):
    return [t for t in people if ".replace(...) puts values" in t]
  assert not conflicts(_chain(5, "value"))
  assert "(replicated and [None])" in " ".join(conflicts(_chain(6, "value")))
  assert "(replicated and ['stacked'])" in " ".join(
      conflicts(_chain(6, "base")))
  assert not conflicts(_chain(7, "base"))


def test_a_function_called_with_star_args_is_out_of_view():
  # `go(*pair)`: which argument reaches which parameter is not in view
  # (global_calls.argument: False), so the step's argument is not either.
  people = _people(_findings(
      "def go(state, batch):\n"
      "  return p_step(state, common_utils.shard(batch))\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  pair = (state, batch)\n  return go(*pair)\n"))
  assert any("argument 0 of p_step, `state`: where it comes from is not in "
             "view" in text for text in people), people


def test_a_dict_of_values_of_no_layout_is_of_none():
  # global_calls.structure_kind: a dict none of whose values is placed is
  # of no layout (S), given to the step as pmap's per-device view.
  findings = _findings(
      "def run(batch):\n  d = {'a': create()}\n"
      "  m = p_step(d, common_utils.shard(batch))\n  return m\n")
  assert not _people(findings), _people(findings)
  assert "pmap's per-device view of its argument 0" in _changed(findings)


@pytest.mark.parametrize("read", ["  print({'loss': m})\n",
                                  "  d = {'loss': m}\n  print(d)\n"],
                         ids=["unnamed", "named"])
def test_an_output_in_a_dict_read_whole_is_read_per_device(read):
  # A dict holding the step's output, unnamed or named and read whole
  # (global_calls.read_as_one: a structure is one value only where it is
  # given to a step unnamed, or named and every read of it is one).
  changed = _changed(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n" + read +
      "  return jax_utils.unreplicate(m)\n"))
  assert f"{BOTH_PLACED}, out_specs jax.P('batch')," in changed


def test_a_step_put_inline_into_a_replace_in_a_function_of_no_return():
  # global_calls.read_as_one of an inline replace where its function
  # returns nothing (`returns` holds no entry for it): judged, no crash.
  people = _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  print(state.replace(metrics=p_step(state, "
      "common_utils.shard(batch))))\n"))
  assert any("state.replace(...) puts values of other layouts together "
             "(replicated and ['stacked'])" in text for text in people), people


def _through(n):
  """The step called through `n + 1` of the program's functions."""
  defs = "".join(f"def f{i}(s, b):\n  return f{i + 1}(s, b)\n\n"
                 for i in range(n))
  return _findings(
      defs + f"def f{n}(s, b):\n  return p_step(s, common_utils.shard(b))\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = f0(state, batch)\n  return jax_utils.unreplicate(m)\n")


def test_the_state_is_followed_through_functions_to_the_readings_depth():
  # global_calls.parameter_kind hands depth + 1 on: two functions deep
  # the state is followed, five deep it is past the reading's bound.
  assert not _people(_through(1))
  assert BOTH_PLACED in _changed(_through(1))
  assert any("argument 0 of p_step, `s`: where it comes from is not in view "
             "(a parameter of f4" in text for text in _people(_through(4)))


def test_the_state_is_followed_three_functions_deep():
  # With test_the_state_is_followed_through_functions_to_the_readings_depth:
  # the bound between three and five functions, as measured.
  assert not _people(_through(2)) and not _people(_through(3))


def test_a_parameter_given_a_batch_and_the_state_is_named_not_placed():
  # global_calls.parameter_kind: two layouts given `s` (a blocker), and
  # then none taken for it (not either one).
  people = _people(_findings(
      "def go(s, b):\n  return p_step(s, common_utils.shard(b))\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  b2 = common_utils.shard(batch)\n"
      "  m = go(state, batch)\n  m2 = go(b2, batch)\n  return m, m2\n"))
  assert any("go's parameter s is given values of different layouts: global "
             "batch at line 18, replicated at line 17" in t for t in people)
  assert any("argument 0 of p_step, `s`: where it comes from is not in view"
             in t for t in people), people


def test_a_value_returned_through_seven_aliases_is_followed():
  # global_calls.returned starts the reading's depth at 0: a replicated
  # state returned through seven aliases is followed to `s = make(...)`.
  chain = "".join(f"  s{i + 1} = s{i}\n" for i in range(7))
  findings = _findings(
      "def make(state):\n  s0 = jax_utils.replicate(state)\n" + chain +
      "  return s7\n\ndef run(state, batch):\n  s = make(state)\n"
      "  m = p_step(s, common_utils.shard(batch))\n"
      "  return jax_utils.unreplicate(m)\n")
  assert not _people(findings), _people(findings)
  assert BOTH_PLACED in _changed(findings)
  # The note for callers elsewhere reads the same depth (its `returned`).
  assert ("callers in other files: make returns global arrays"
          in _changed(findings))


def test_a_function_returning_one_value_unpacked_as_two_is_named():
  # `a, b = make(state)` where `make` returns a name, not a tuple
  # (global_calls.returned reads element j of tuples only): named, no crash.
  people = _people(_findings(
      "def make(state):\n  s = jax_utils.replicate(state)\n  return s\n\n"
      "def run(state, batch):\n  a, b = make(state)\n"
      "  m = p_step(a, common_utils.shard(batch))\n  return m\n"))
  assert ("global step not written: make returns a replicated value (line "
          "13): call it as `x = make(...)` so that it can be followed "
          "(docs/REWRITE.md#functions)") in people, people


def test_a_function_returning_a_tuple_or_one_value_is_named_where_unpacked():
  # `return s` beside `return s, 1`, unpacked as `a, b = make(...)`
  # (global_calls.returned: element j of tuples only).
  people = _people(_findings(
      "def make(state, flag):\n  s = jax_utils.replicate(state)\n"
      "  if flag:\n    return s\n  return s, 1\n\n"
      "def run(state, batch):\n  a, b = make(state, 0)\n"
      "  m = p_step(a, common_utils.shard(batch))\n"
      "  return jax_utils.unreplicate(m)\n"))
  assert sum("s is placed once on the mesh now" in t for t in people) == 2, (
      people)
  # Its returns are of two lengths: no element is read (global_calls.
  # check_returns reads elements of one length only).
  assert not any("make returns" in t for t in people), people


def test_a_tuple_shorter_than_its_unpacking_is_named_not_indexed():
  # `return (s,)` unpacked as `a, b = make(...)`, `b` given to the step
  # (global_calls.returned: element 1 of a 1-tuple is no element).
  people = _people(_findings(
      "def make(state):\n  s = jax_utils.replicate(state)\n"
      "  return (s,)\n\n"
      "def run(state, batch):\n  a, b = make(state)\n"
      "  m = p_step(b, common_utils.shard(batch))\n  return m\n"))
  assert any("make returns a replicated value (line 13): call it as `x = "
             "make(...)`" in t for t in people), people


def test_a_function_returning_global_batches_in_a_tuple_is_named_as_such():
  # global_calls.check_returns: element 0 is global batches, the call
  # binds one name: the words say batches, and the form unpacks two.
  people = _people(_findings(
      "def make(it, state):\n  b = jax_utils.prefetch_to_device(it, 2)\n"
      "  return b, state\n\n"
      "def run(state, it):\n  state = jax_utils.replicate(state)\n"
      "  x = make(it, state)\n"
      "  for batch in x[0]:\n    m = p_step(state, batch)\n  return m\n"))
  assert any("make returns global batches (line 13): call it as `x, y = "
             "make(...)`" in t for t in people), people


def test_a_step_factory_used_as_a_value_is_named():
  # global_calls.check_factories: a function returning a pmap, called once
  # and also handed on as a value.
  people = _people(_findings(
      "def make_step():\n"
      "  return jax.pmap(train_step, axis_name='batch')\n\n"
      "def run(state, batch):\n  q_step = make_step()\n"
      "  makers = [make_step]\n  state = jax_utils.replicate(state)\n"
      "  m = q_step(state, common_utils.shard(batch))\n  return m\n"))
  assert any("make_step returns a pmap (line 12) and is defined or " in t
             for t in people), people
  # Word for word, at the line the step is bound.
  assert [(f.line, f.text) for f in _findings(
      "def make_step():\n"
      "  return jax.pmap(train_step, axis_name='batch')\n\n"
      "def run(state, batch):\n  q_step = make_step()\n"
      "  makers = [make_step]\n  state = jax_utils.replicate(state)\n"
      "  m = q_step(state, common_utils.shard(batch))\n  return m\n")
          if "returns a pmap" in f.text] == [(15, (
              "global step not written: make_step returns a pmap (line 12) "
              "and is defined or called other than once as `step = "
              "make_step(...)` (lines [15, 16]): each call's step is that "
              "one pmap to the reading; call it once "
              "(docs/REWRITE.md#functions)"))]


def test_a_value_returned_through_two_functions_is_followed_to_the_bound():
  # global_calls.returned hands depth + 1 on: through `make2` to `make`'s
  # seven aliases the reading's bound is passed, and `t` is read as
  # before, per device (with seven aliases in one function, followed).
  chain = "".join(f"  s{i + 1} = s{i}\n" for i in range(7))
  people = _people(_findings(
      "def make(state):\n  s0 = jax_utils.replicate(state)\n" + chain +
      "  return s7\n\ndef make2(state):\n  t = make(state)\n  return t\n\n"
      "def run(state, batch):\n  s = make2(state)\n"
      "  m = p_step(s, common_utils.shard(batch))\n"
      "  return jax_utils.unreplicate(m)\n"))
  assert any("t is placed once on the mesh now" in t for t in people), people


def test_a_step_factory_called_once_is_read_as_its_step():
  # global_calls.check_factories: one def, one call, never a value.
  people = _people(_findings(
      "def make_step():\n"
      "  return jax.pmap(train_step, axis_name='batch')\n\n"
      "def run(state, batch):\n  q_step = make_step()\n"
      "  state = jax_utils.replicate(state)\n"
      "  m = q_step(state, common_utils.shard(batch))\n  return m\n"))
  assert not any("returns a pmap" in t for t in people), people


def test_a_function_returning_tuples_of_two_lengths_is_not_read_by_element():
  # global_calls.check_returns reads elements where every return is a
  # tuple of one length; of two lengths, none (no call form to name).
  people = _people(_findings(
      "def make(state, f):\n  s = jax_utils.replicate(state)\n"
      "  if f:\n    return s, 1\n  return s, 1, 2\n\n"
      "def run(state, batch):\n  a, b = make(state, 1)\n"
      "  m = p_step(a, common_utils.shard(batch))\n  return m\n"))
  assert not any("make returns a replicated value" in t for t in people), (
      people)


@pytest.mark.parametrize("aliases, named", [(7, True), (8, False)])
def test_a_tuples_element_is_followed_to_the_readings_depth(aliases, named):
  # global_calls.check_returns reads each element from depth 0: seven
  # aliases inside `make` are within the bound (its call named, as it
  # binds one name to a tuple holding the state), eight past it.
  chain = "".join(f"  s{i + 1} = s{i}\n" for i in range(aliases))
  people = _people(_findings(
      "def make(state):\n  s0 = jax_utils.replicate(state)\n" + chain +
      f"  return s{aliases}, 1\n\ndef run(state, batch):\n"
      "  x = make(state)\n  m = p_step(x[0], common_utils.shard(batch))\n"
      "  return m\n"))
  assert any("make returns a replicated value" in t for t in people) == named


def test_the_note_for_callers_elsewhere_reads_a_tuples_element_from_depth_0():
  # global_calls.notes: `make` returns the state through seven aliases in
  # a tuple, unpacked here: its note for callers in other files says so.
  chain = "".join(f"  s{i + 1} = s{i}\n" for i in range(7))
  changed = _changed(_findings(
      "def make(state):\n  s0 = jax_utils.replicate(state)\n" + chain +
      "  return s7, 1\n\ndef run(state, batch):\n  s, k = make(state)\n"
      "  m = p_step(s, common_utils.shard(batch))\n"
      "  return jax_utils.unreplicate(m)\n"))
  assert "callers in other files: make returns global arrays" in changed
