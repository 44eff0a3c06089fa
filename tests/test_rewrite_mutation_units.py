"""The `--global` reading's behaviours that mutation testing (`python -m
bench.mutation`, issue 60) found no fast test pinning: each a small
program rewritten in-process, no program run (bench/mutation_triage.toml
names the mutant each test kills)."""

import pytest

from compare._src.rewrite.rewrite_global import rewrite_global_source

HEAD = ("import jax\nimport jax.numpy as jnp\nfrom flax import jax_utils\n"
        "from flax.training import common_utils\n\n"
        "def train_step(state, batch):\n"
        "  return jax.lax.pmean(batch, 'batch')\n\n"
        "p_step = jax.pmap(train_step, axis_name='batch')\n\n")
BOTH_PLACED = "in_specs (jax.P(), jax.P('batch'))"


def _findings(body, head=HEAD):
  return rewrite_global_source(head + body).findings


def _people(findings):
  return [f.text for f in findings if f.kind == "person"]


def _changed(findings):
  return " | ".join(f.text for f in findings if f.kind == "changed")


def test_a_replace_of_a_state_out_of_view_is_out_of_view_too():
  # global_calls.replace_kind: `x.replace(...)` of an `x` of no known
  # layout (a parameter of a function never called) is of none either,
  # not a host value; global_reader.visit_Assign judges it whole.
  people = _people(_findings(
      "def run(state, batch):\n  s = state.replace(step=1)\n"
      "  return p_step(s, common_utils.shard(batch))\n"))
  assert len(people) == 1, people
  assert "argument 0 of p_step, `s`: where it comes from is not in view" in (
      people[0])


def test_a_tuple_placed_by_the_files_own_replicator_is_placed_alike():
  # `a, b = jax.tree.map(rep, (a, b))`, `rep` a replicator bound in the
  # file: both parts replicated, the call followed.
  findings = _findings(
      "def run(a, b, batch):\n  rep = lambda x: jnp.array([x] * 8)\n"
      "  a, b = jax.tree.map(rep, (a, b))\n"
      "  return p_step(a, common_utils.shard(batch))\n")
  assert not _people(findings)
  assert BOTH_PLACED in _changed(findings)
  assert "jax.tree.map(...) -> jax.device_put(" in _changed(findings)


def test_batches_of_a_prefetch_looped_over_are_global_batches():
  findings = _findings(
      "def run(state, it):\n  state = jax_utils.replicate(state)\n"
      "  for batch in jax_utils.prefetch_to_device(it, 2):\n"
      "    m = p_step(state, batch)\n  return m\n")
  assert not _people(findings)
  assert BOTH_PLACED in _changed(findings)
  assert "jax_utils.prefetch_to_device(...) of batches" in _changed(findings)
  # global_reader.visit_For: the loop's batches are the prefetch's, not
  # values of no known layout left stacked.
  assert not [f for f in findings if f.kind == "kept"], findings


def test_a_zip_loop_takes_each_name_from_its_own_iterable():
  # `for step, batch in zip(range(n), it)` (flax imagenet): `batch` from
  # the prefetched `it`, a global batch.
  findings = _findings(
      "def run(state, it, n):\n  state = jax_utils.replicate(state)\n"
      "  it = jax_utils.prefetch_to_device(it, 2)\n"
      "  for step, batch in zip(range(n), it):\n"
      "    m = p_step(state, batch)\n  return m\n")
  assert not _people(findings)
  assert BOTH_PLACED in _changed(findings)


def test_a_function_rebound_to_its_own_pmap_is_no_step_used_as_a_value():
  # `step = jax.pmap(step)`: the `step` pmap is given is the function
  # mapped, not the step handed on.
  findings = _findings(
      "def step(state, batch):\n  return jax.lax.pmean(batch, 'batch')\n\n"
      "step = jax.pmap(step, axis_name='batch')\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  return step(state, common_utils.shard(batch))\n",
      head=HEAD[:HEAD.index("def train_step")])
  assert not _people(findings)
  assert BOTH_PLACED in _changed(findings)


def test_a_nested_function_taking_a_placed_value_is_no_public_function():
  # Only a module-level function may be called from another file: a
  # nested one given the replicated state gets no "callers in other
  # files" note.
  findings = _findings(
      "def run(state, batch):\n  def go(s):\n"
      "    return p_step(s, common_utils.shard(batch))\n"
      "  state = jax_utils.replicate(state)\n  return go(state)\n")
  assert not _people(findings)
  assert BOTH_PLACED in _changed(findings)
  assert "callers in other files" not in _changed(findings)


def test_returns_of_tuples_of_two_lengths_are_not_read_by_element():
  # A public function is noted as returning global arrays element by
  # element only where every return is a tuple of one length.
  def ran(second):
    return _findings(
        "def init(state, n):\n  state = jax_utils.replicate(state)\n"
        "  if n:\n    return state, 1\n"
        f"  return {second}\n\n"
        "def run(state, batch):\n  s, _ = init(state, 0)\n"
        "  return p_step(s, common_utils.shard(batch))\n")
  same = ran("state, 2")
  assert "callers in other files: init returns global arrays" in _changed(
      same)
  assert BOTH_PLACED in _changed(same)
  two = ran("state, 1, 2")
  assert "callers in other files" not in _changed(two)



def test_a_steps_output_unpacked_into_a_call_keeps_its_stacked_layout():
  # `show(*m)`: which parameter takes which part of the output cannot be
  # read, so it is not followed into `show` (which reads its parameter as
  # one value): the output stays stacked, out_specs P('batch'). Given
  # whole (`show(m)`), it is followed and read as one value: P().
  def ran(call):
    return _changed(_findings(
        "def show(a):\n  return jax_utils.unreplicate(a)\n\n"
        "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
        "  m = p_step(state, common_utils.shard(batch))\n"
        f"  return {call}\n"))
  assert f"{BOTH_PLACED}, out_specs jax.P('batch')" in ran("show(*m)")
  assert f"{BOTH_PLACED}, out_specs jax.P()," in ran("show(m)")


def test_a_replaces_values_are_followed_one_binding_deeper_within_the_limit():
  # The reading follows a value through at most 8 bindings (a guard on
  # its recursion), `x.replace(k=v)`'s `v` counted one deeper than the
  # replace: an alias chain of 6 from the replicated `o0` is followed,
  # one of 7 is out of view, a mix with the replicated state refused.
  def people(n):
    chain = "".join(f"  o{i} = o{i - 1}\n" for i in range(1, n + 1))
    return " | ".join(_people(_findings(
        "def run(state, o0, batch):\n  state = jax_utils.replicate(state)\n"
        "  o0 = jax_utils.replicate(o0)\n" + chain +
        f"  s = state.replace(opt=o{n})\n"
        "  return p_step(s, common_utils.shard(batch))\n")))
  mixed = "state.replace(...) puts values of other layouts together"
  assert mixed not in people(6)
  assert f"{mixed} (replicated and [None])" in people(7)


def test_a_dicts_values_are_followed_one_binding_deeper_within_the_limit():
  # As a replace's values: `dict(opt=o6)` of a chain of 6 aliases of the
  # replicated `o0` is replicated, the step takes it as P(); of 7, out of
  # view.
  def findings(n):
    chain = "".join(f"  o{i} = o{i - 1}\n" for i in range(1, n + 1))
    return _findings(
        "def run(o0, batch):\n  o0 = jax_utils.replicate(o0)\n" + chain +
        f"  d = dict(opt=o{n})\n"
        "  return p_step(d, common_utils.shard(batch))\n")
  six = findings(6)
  assert not _people(six) and BOTH_PLACED in _changed(six)
  assert [p[:52] for p in _people(findings(7))] == [
      "global step not written: argument 0 of p_step, `d`: "]


def test_a_parameters_default_of_none_is_a_value_of_no_layout():
  # `def show(s=None)`, called `show(state)` and `show()`: the default is
  # a host value (stacked, as pmap left it), so `s` is given two layouts.
  people = _people(_findings(
      "def show(s=None):\n  return jax_utils.unreplicate(s)\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  show(state)\n  show()\n"
      "  return p_step(state, common_utils.shard(batch))\n"))
  assert any("show's parameter s is given values of different layouts: "
             "replicated at line 16, stacked at line 17" in p
             for p in people), people


def test_a_decorated_pmaps_static_argument_is_no_argument_laid_out():
  # `@functools.partial(jax.pmap, ..., static_broadcasted_argnums=(2,))`:
  # the `3` given it is no value the second step places; the state and
  # batch alone take in_specs.
  findings = rewrite_global_source(
      "import functools\nimport jax\nfrom flax import jax_utils\n"
      "from flax.training import common_utils\n\n"
      "@functools.partial(jax.pmap, axis_name='batch',"
      " static_broadcasted_argnums=(2,))\n"
      "def p_step(state, batch, n):\n"
      "  return jax.lax.pmean(batch * n, 'batch')\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  return p_step(state, common_utils.shard(batch), 3)\n").findings
  assert not _people(findings)
  assert (f"{BOTH_PLACED}, out_specs jax.P('batch'), check_vma=False (as "
          "pmap runs), static_broadcasted_argnums (2,) as jit's static_argnums"
          ) in _changed(findings)


def test_a_bare_pmap_decorator_takes_the_global_step_over_its_devices():
  # `@jax.pmap`, no call: no static argument to read, the axis "devices".
  findings = rewrite_global_source(
      "import jax\nfrom flax import jax_utils\n"
      "from flax.training import common_utils\n\n"
      "@jax.pmap\ndef p_step(state, batch):\n  return batch * 2\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  return p_step(state, common_utils.shard(batch))\n").findings
  assert not _people(findings)
  assert "in_specs (jax.P(), jax.P(\"devices\"))" in _changed(findings)


def test_a_pmaps_static_argument_is_no_argument_laid_out():
  # `p_step = jax.pmap(f, ..., static_broadcasted_argnums=(2,))`, or the
  # same through `functools.partial(jax.pmap, ...)(f)`: as the decorated
  # step's, the `3` takes no in_spec.
  for made in ("jax.pmap(train_step, axis_name='batch',"
               " static_broadcasted_argnums=(2,))",
               "functools.partial(jax.pmap, axis_name='batch',"
               " static_broadcasted_argnums=(2,))(train_step)"):
    findings = rewrite_global_source(
        "import functools\nimport jax\nfrom flax import jax_utils\n"
        "from flax.training import common_utils\n\n"
        "def train_step(state, batch, n):\n"
        "  return jax.lax.pmean(batch * n, 'batch')\n\n"
        f"p_step = {made}\n\n"
        "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
        "  return p_step(state, common_utils.shard(batch), 3)\n").findings
    assert not _people(findings), made
    assert "static_broadcasted_argnums (2,) as jit's static_argnums" in (
        _changed(findings))
    assert BOTH_PLACED in _changed(findings), made


def test_an_output_put_in_a_named_dict_or_replace_read_as_one_is_one_value():
  # `d = dict(loss=m)` or `s = x.replace(k=p_step(...))` of the step's
  # output, then unreplicated: the output is read as one value, its
  # out_specs P().
  def changed(lines):
    return _changed(_findings(
        "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
        "  b = common_utils.shard(batch)\n" + lines))
  as_one = f"{BOTH_PLACED}, out_specs jax.P(),"
  assert as_one in changed("  m = p_step(state, b)\n  d = dict(loss=m)\n"
                           "  return jax_utils.unreplicate(d)\n")
  assert as_one in changed("  m = p_step(state, b)\n"
                           "  s = m.replace(k=p_step(state, b))\n"
                           "  return jax_utils.unreplicate(s)\n")


def test_a_placement_assigned_to_a_subscript_is_one_not_followed():
  # `h["s"] = jax_utils.replicate(other)`: no name to follow it by.
  people = _people(_findings(
      "def run(state, other, batch, h):\n"
      "  state = jax_utils.replicate(state)\n"
      "  h['s'] = jax_utils.replicate(other)\n"
      "  return p_step(state, common_utils.shard(batch))\n"))
  assert people == [
      "global step not written: the value of jax_utils.replicate(...) goes "
      "where its layout cannot be followed (inside an expression, a "
      "comprehension or a return): bind it to a name first, or place it by "
      "hand (docs/MIGRATION.md#idiom-map)"]


def test_next_of_prefetched_batches_is_a_global_batch():
  findings = _findings(
      "def run(state, it):\n  state = jax_utils.replicate(state)\n"
      "  it = jax_utils.prefetch_to_device(it, 2)\n  batch = next(it)\n"
      "  return p_step(state, batch)\n")
  assert not _people(findings)
  assert BOTH_PLACED in _changed(findings)


def test_a_function_returning_a_placed_value_not_bound_names_its_return():
  people = _people(_findings(
      "def init(state):\n  return jax_utils.replicate(state)\n\n"
      "def run(state, batch):\n"
      "  return p_step(init(state), common_utils.shard(batch))\n"))
  assert any("init returns a replicated value (line 12): call it as "
             "`x = init(...)`" in p for p in people), people


def test_a_public_functions_note_says_what_callers_elsewhere_now_get():
  notes = [f.text for f in _findings(
      "def init(state):\n  state = jax_utils.replicate(state)\n"
      "  return state\n\n"
      "def run(state, batch):\n  s = init(state)\n"
      "  return p_step(s, common_utils.shard(batch))\n")
           if f.text.startswith("callers in other files")]
  assert notes == [
      "callers in other files: init returns global arrays, as this file's "
      "calls give and read them; a caller in another file, if any, now "
      "gives and gets them placed once (NamedSharding), not pmap's "
      "[devices, ...]"]


def test_prefetch_given_its_batches_by_keyword_is_left_to_a_person():
  people = _people(_findings(
      "def run(state, it):\n  state = jax_utils.replicate(state)\n"
      "  for batch in jax_utils.prefetch_to_device(iterator=it, size=2):\n"
      "    m = p_step(state, batch)\n  return m\n"))
  assert ("global step not written: prefetch_to_device's batches given by "
          "keyword or */**: place each global batch with NamedSharding(mesh, "
          "P(axis)) by hand (docs/MIGRATION.md#prefetch)") in people, people


def test_a_zip_loop_unpacking_an_iterable_is_left_to_a_person():
  # `zip(range(n), *its)`: which iterable `batch` comes from is not in
  # view (global_reader.visit_For pairs names with arguments only where no
  # argument is starred or a keyword).
  findings = _findings(
      "def run(state, it, n):\n  state = jax_utils.replicate(state)\n"
      "  its = jax_utils.prefetch_to_device(it, 2)\n"
      "  for step, batch in zip(range(n), *its):\n"
      "    m = p_step(state, batch)\n  return m\n")
  assert any("its is global batches now: read them in a for loop or with "
             "next()" in text for text in _people(findings)), findings
  assert BOTH_PLACED not in _changed(findings)


def test_an_output_in_a_dict_literal_read_as_one_is_one_value():
  # `{"loss": m}` (global_reader.visit_Dict), as `dict(loss=m)` above.
  findings = _findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n"
      "  d = {'loss': m}\n  return jax_utils.unreplicate(d)\n")
  assert f"{BOTH_PLACED}, out_specs jax.P()," in _changed(findings)
  assert ("jax_utils.unreplicate(...) of a replicated value -> the value "
          "itself") in _changed(findings)


def test_index_0_of_a_reduced_output_read_alone_is_the_value():
  # `m[0]` of the step's pmean'd output, printed (global_reader.
  # visit_Subscript): one value, P(), its [0] gone.
  findings = _findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n"
      "  print(m[0])\n  return m\n")
  assert f"{BOTH_PLACED}, out_specs jax.P()," in _changed(findings)
  assert ("m[0] of a value the step reduces over the axis (one value now, "
          "P()) -> m") in _changed(findings)


def test_a_files_own_split_function_places_the_global_batch():
  # The pmap tutorial's `split` (global_reader.visit_FunctionDef reads it as
  # a splitter): its call becomes the global batch, the function left.
  changed = _changed(_findings(
      "def split(arr):\n"
      "  return arr.reshape(8, arr.shape[0] // 8, *arr.shape[1:])\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, split(batch))\n"
      "  return jax_utils.unreplicate(m)\n"))
  assert ("split(...) -> jax.make_array_from_process_local_data(NamedSharding("
          "mesh, P(\"batch\")), ...)") in changed
  assert BOTH_PLACED in changed


def test_a_step_bound_twice_is_named_once_as_such():
  # Two pmaps bound to `p_step` (global_reader._add_step): one person
  # finding naming both lines, none saying a pmap is bound to no name.
  people = _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n"
      "  return jax_utils.unreplicate(m)\n\n"
      "p_step = jax.pmap(train_step, axis_name='batch')\n"))
  assert len(people) == 1, people
  assert "two pmaps bound to the name p_step (lines 9 and 16)" in people[0]


def test_an_output_fed_back_by_keyword_keeps_its_stacked_layout():
  # test_rewrite_global_handed's nlp_seq of 2021, rewritten only (its run is
  # a slow test): a key per device given back by keyword is read per device
  # (global_reader.given_to_step: "stepkw", not one value).
  from tests import test_rewrite_global_handed as handed  # pylint: disable=g-import-not-at-top
  text = handed.HANDED.replace(
      "  keep = jax.random.bernoulli(dropout_rng, 0.9, batch[\"x\"].shape)",
      "  dropout_rng, new_dropout_rng = jax.random.split(dropout_rng)\n"
      "  keep = jax.random.bernoulli(dropout_rng, 0.9, batch[\"x\"].shape)"
  ).replace("  return new_params, metrics\n",
            "  return new_params, metrics, new_dropout_rng\n").replace(
                "    params, metrics = p_train_step(params, batch, "
                "dropout_rng=dropout_rngs)",
                "    params, metrics, dropout_rngs = p_train_step(\n"
                "        params, batch, dropout_rng=dropout_rngs)")
  assert text.count("new_dropout_rng") == 2
  code = rewrite_global_source(text).code
  assert "out_specs=(jax.P(), jax.P(\"batch\"), jax.P(\"batch\"))" in code


def test_a_state_and_batch_given_by_keyword_are_named_once_each():
  # A keyword argument is a read the step takes (global_reader.
  # given_to_step's "stepkw", in global_layouts' allowed reads): each
  # placed value given so is named once, for its keyword, and not again
  # as a read that would see its new shape.
  people = _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  b = common_utils.shard(batch)\n"
      "  m = p_step(state=state, batch=b)\n"
      "  return jax_utils.unreplicate(m)\n"))
  assert len(people) == 2 and all(
      "keyword arguments keep pmap's stacked layout; pass it positionally"
      in text for text in people), people


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


def test_a_bare_return_beside_a_placed_one_returns_the_placed_value():
  # global_reader.visit_Return records returns with a value only: `make`
  # returns the replicated state, called as `s = make(...)`.
  findings = _findings(
      "def make(state):\n  if state is None:\n    return\n"
      "  s = jax_utils.replicate(state)\n  return s\n\n"
      "def run(state, batch):\n  s = make(state)\n"
      "  m = p_step(s, common_utils.shard(batch))\n"
      "  return jax_utils.unreplicate(m)\n")
  assert not _people(findings), _people(findings)
  assert BOTH_PLACED in _changed(findings)


def test_a_value_bound_to_two_names_at_once_is_left_to_a_person():
  # `s = t = replicate(...)` (global_reader.visit_Assign: one target only
  # is followed; the value's reads still seen).
  people = _people(_findings(
      "def run(state, batch):\n  s = t = jax_utils.replicate(state)\n"
      "  m = p_step(s, common_utils.shard(batch))\n  return m\n"))
  assert any("the value of jax_utils.replicate(...) goes where its layout "
             "cannot be followed" in text for text in people), people


def test_a_tuple_of_batches_sharded_together_is_placed_alike():
  # `b1, b2 = common_utils.shard((batch, batch))`: each part a global batch.
  findings = _findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  b1, b2 = common_utils.shard((batch, batch))\n"
      "  m = p_step(state, b1)\n  return jax_utils.unreplicate(m)\n")
  assert not _people(findings), _people(findings)
  assert f"{BOTH_PLACED}, out_specs jax.P()," in _changed(findings)


def test_a_tuple_replicated_together_reads_what_it_holds():
  # `a, b = replicate((m, state))`: the reads inside the placed tuple are
  # seen (the step's output and the state, each read again).
  people = _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n"
      "  a, b = jax_utils.replicate((m, state))\n  return a\n"))
  assert any("state is placed once on the mesh now" in text
             for text in people), people


def test_a_tree_map_of_the_files_replicator_places_the_state():
  # `rep = lambda x: jnp.array([x] * 8)`, then `jax.tree.map(rep, state)`:
  # a replicate (global_reader.visit_Assign asks `known` for `rep`).
  changed = _changed(_findings(
      "def run(state, batch):\n  rep = lambda x: jnp.array([x] * 8)\n"
      "  s = jax.tree.map(rep, state)\n"
      "  m = p_step(s, common_utils.shard(batch))\n"
      "  return jax_utils.unreplicate(m)\n"))
  assert "jax.tree.map(...) -> jax.device_put(..., NamedSharding(mesh, P()))" in (
      changed)
  assert BOTH_PLACED in changed


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


def test_a_step_put_inline_into_a_nested_functions_returned_replace():
  # The inline call's scope is the innermost function's (global_reader.
  # visit_Call): its returned replace is read where `inner` is called.
  people = _people(_findings(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  def inner(b):\n"
      "    return state.replace(metrics=p_step(state, "
      "common_utils.shard(b)))\n"
      "  s = inner(batch)\n  return jax_utils.unreplicate(s)\n"))
  assert any("(conflict and ['replicated'])" in text for text in people), (
      people)


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


def test_a_tuple_of_the_state_and_an_output_unreplicated_together_is_dropped():
  # `s, n = unreplicate((state, m))` (flax's pixelcnn form): each part read
  # as one value, the call dropped (global_reader.visit_Call records each
  # part's container and the call's parts).
  done = rewrite_global_source(
      HEAD + "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  m = p_step(state, common_utils.shard(batch))\n"
      "  s, n = jax_utils.unreplicate((state, m))\n  return s, n\n")
  findings = done.findings
  assert not _people(findings), _people(findings)
  assert "  s, n = (state, m)\n" in done.code, done.code
  changed = _changed(findings)
  assert f"{BOTH_PLACED}, out_specs jax.P()," in changed
  assert "jax_utils.unreplicate(...) of a replicated value -> the value " in (
      changed)


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


@pytest.mark.parametrize("placed", [
    "jax.tree.map(rep, state)", "list(jax_utils.prefetch_to_device(it, 2))"],
                         ids=["own_replicator", "prefetch"])
def test_a_placement_given_inline_is_left_to_a_person(placed):
  # global_reader.leave_Module: a placement whose value goes where the
  # reading does not follow it (here into print), the file's own
  # replicator's tree map and a prefetch included.
  what = placed.split("(")[0] if "tree" in placed else (
      "jax_utils.prefetch_to_device")
  people = _people(_findings(
      "def run(state, it):\n  rep = lambda x: jnp.array([x] * 8)\n"
      f"  print({placed})\n  state = jax_utils.replicate(state)\n"
      "  for batch in jax_utils.prefetch_to_device(it, 2):\n"
      "    m = p_step(state, batch)\n  return m\n"))
  assert any(f"the value of {what}(...) goes where its layout cannot be "
             "followed" in t for t in people), people


def test_a_nested_functions_unreplicated_tuple_reads_its_own_names():
  # The parts of `unreplicate((st, m))` in `inner` are `inner`'s names
  # (global_reader.visit_Call records the innermost scope).
  findings = _findings(
      "def run(state, batch):\n  def inner(st, b):\n"
      "    st = jax_utils.replicate(st)\n"
      "    m = p_step(st, common_utils.shard(b))\n"
      "    s, n = jax_utils.unreplicate((st, m))\n    return s, n\n"
      "  return inner(state, batch)\n")
  assert not _people(findings), _people(findings)
  assert f"{BOTH_PLACED}, out_specs jax.P()," in _changed(findings)


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
