"""The `--global` reading's behaviours that only slow tests had pinned,
found by `python -m bench.mutation` running global_reader in full (issue
60): each a small program rewritten in-process, no program run
(bench/mutation/triage.toml names the mutant each test kills)."""

import pytest

from compare._src.rewrite.pipeline import rewrite_global_source
from tests import test_rewrite_global_handed
from tests.test_rewrite_mutation_units import BOTH_PLACED
from tests.test_rewrite_mutation_units import HEAD
from tests.test_rewrite_mutation_units import _changed
from tests.test_rewrite_mutation_units import _findings
from tests.test_rewrite_mutation_units import _people


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
  text = test_rewrite_global_handed.key_fed_back_by_keyword()
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


def test_a_step_put_inline_into_a_nested_functions_returned_replace():
  # The inline call's scope is the innermost function's (global_reader.
  # visit_Call): its returned replace is read where `inner` is called.
  # `inner` is defined before `state` is replicated: it may see either.
  people = _people(_findings(
      "def run(state, batch):\n"
      "  def inner(b):\n"
      "    return state.replace(metrics=p_step(state, "
      "common_utils.shard(b)))\n"
      "  state = jax_utils.replicate(state)\n"
      "  s = inner(batch)\n  return jax_utils.unreplicate(s)\n"))
  assert any("(conflict and ['replicated'])" in text for text in people), (
      people)


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
