"""The `--global` reading's behaviours that mutation testing (`python -m
bench.mutation`, issue 60) found no fast test pinning: each a small
program rewritten in-process, no program run (bench/mutation/triage.toml
names the mutant each test kills)."""

from compare._src.rewrite.pipeline import rewrite_global_source

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
  assert f"{BOTH_PLACED}, out_specs jax.P('batch')" in _changed(findings)
  assert ("static_broadcasted_argnums (2,) as jit's static_argnums, closed "
          "over by the function shard_map maps") in _changed(findings)


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
