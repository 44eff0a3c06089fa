"""The global step's writing (write/placements, write/pmap_sites), unit by
unit: what mutation testing (`python -m bench.mutation`, issue 73) found no
fast test pinning. Each a small program rewritten in-process by
`rewrite_global_source`, no program run (bench/mutation/triage.toml names
the mutant each test kills)."""

from compare._src.rewrite.pipeline import rewrite_global_source
from compare._src.rewrite.records import Kind

HEAD = ("import jax\nimport jax.numpy as jnp\nfrom flax import jax_utils\n"
        "from flax.training import common_utils\n\n"
        "def train_step(state, batch):\n"
        "  return jax.lax.pmean(batch, 'batch')\n\n"
        "p_step = jax.pmap(train_step, axis_name='batch')\n\n")


def _rewritten(body):
  return rewrite_global_source(HEAD + body)


def test_a_replicate_and_a_reduced_read_say_in_full_what_they_became():
  result = _rewritten(
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  loss = p_step(state, common_utils.shard(batch))\n"
      "  return loss[0]\n")
  assert result.code.endswith("  return loss\n")
  said = [(f.line, f.kind, f.text) for f in result.findings]
  assert (12, Kind.CHANGED, "jax_utils.replicate(...) -> jax.device_put(..., "
          "NamedSharding(mesh, P())): the state placed once, no copy per "
          "device") in said
  assert said[-1] == (14, Kind.CHANGED, "loss[0] of a value the step "
                      "reduces over the axis (one value now, P()) -> loss")


def test_a_prefetch_of_shard_mapped_over_batches_reads_that_iterator():
  result = _rewritten(
      "def run(state, it):\n  state = jax_utils.replicate(state)\n"
      "  for batch in jax_utils.prefetch_to_device(\n"
      "      map(common_utils.shard, it), 2):\n"
      "    m = p_step(state, batch)\n  return m\n")
  assert ("jax.make_array_from_process_local_data(\n"
          "          jax.NamedSharding(mesh, jax.P(\"batch\")), _batch)\n"
          "      for _batch in it):\n" in result.code)


def test_a_placement_written_deep_in_a_line_is_packed_from_its_column():
  # The state's placement starts at column 38: packed from there, not 0.
  result = _rewritten(
      "def run(state, batch):\n  if True:\n    if True:\n      if True:\n"
      "        state_with_a_long_name_here = jax_utils.replicate("
      "state_with_a_long_name)\n  return p_step(state_with_a_long_name_here,"
      " common_utils.shard(batch))\n")
  assert ("        state_with_a_long_name_here = jax.device_put("
          "state_with_a_long_name,\n            jax.NamedSharding(mesh, "
          "jax.P()))\n" in result.code)
  # The batch's placement starts at column 45: its rows go on a line of
  # their own.
  assert ("  return p_step(state_with_a_long_name_here, "
          "jax.make_array_from_process_local_data(\n"
          "      jax.NamedSharding(mesh, jax.P(\"batch\")),\n"
          "      batch))\n" in result.code)


def test_a_collectives_axis_given_by_keyword_after_another_is_read():
  # all_gather(x, axis=0, axis_name='j'): the axis is the keyword's, not
  # the second argument's.
  result = _rewritten(
      "def h(x):\n  return jax.lax.all_gather(x, axis=0, axis_name='j')\n")
  assert [(f.line, f.text) for f in result.findings
          if f.kind == Kind.PERSON][0] == (
              12, "all_gather over 'j', an axis no pmap of this file names: "
              "give it the mesh axis it runs under")


def test_a_file_that_joins_sets_the_mesh_after_the_join_and_says_why():
  # write/global_step.plain's joined branch: no mesh named at import.
  head = HEAD.replace("\ndef train_step", "\njax.distributed.initialize()\n"
                      "\ndef train_step", 1)
  result = rewrite_global_source(
      head + "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  return p_step(state, common_utils.shard(batch))\n")
  assert result.code.count("jax.set_mesh(jax.sharding.Mesh(") == 1
  assert "mesh=" not in result.code and "_pmap_" not in result.code
  assert (result.code.split("jax.distributed.initialize()\n")[1]
          .lstrip("# ").startswith("pmap's devices"))
  assert [(f.line, f.kind, f.text) for f in result.findings][0] == (
      6, Kind.CHANGED, "jax.set_mesh(Mesh(every process's devices)) after "
      "the join: the steps' shard_map name no mesh and the placements only "
      "a jax.P(...); a mesh built at import would start the backend before "
      "jax.distributed.initialize")


def test_an_argument_stacked_by_hand_is_said_to_keep_its_layout():
  result = _rewritten(
      "def run(state, batch):\n  state = jnp.stack([state] * 8)\n"
      "  return p_step(state, common_utils.shard(batch))\n")
  assert [(f.line, f.kind, f.text) for f in result.findings][0] == (
      9, Kind.KEPT, "p_step's argument(s) 0 keep pmap's stacked layout "
      "[devices, ...]: made by no replicate, shard or prefetch_to_device the "
      "second step knows (a key per device stays so; a state or batch "
      "stacked by hand is placed by hand: docs/MIGRATION.md#idiom-map)")


def test_a_step_returning_two_replicated_values_records_none_for_each():
  head = HEAD.replace("  return jax.lax.pmean", "  return state, jax.lax.pmean")
  result = rewrite_global_source(
      head + "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  state, m = p_step(state, common_utils.shard(batch))\n"
      "  return state, m\n")
  port, = result.ports
  assert (port.in_axes, port.out_axes) == ((None, None), (None, None))
  assert (port.in_specs, port.out_specs) == (
      "(jax.P(), jax.P('batch'))", "jax.P()")


def test_an_output_read_both_ways_is_refused_naming_both_lines():
  # plan.step_outputs: output 1 read as one value at line 15, per device
  # (given on whole) at 17; output 0 kept alike.
  head = HEAD.replace("  return jax.lax.pmean", "  return state, jax.lax.pmean")
  result = rewrite_global_source(
      head + "def run(s, b, log):\n  s = jax_utils.replicate(s)\n"
      "  b = common_utils.shard(b)\n  s, m = p_step(s, b)\n"
      "  print(jax_utils.unreplicate(m))\n  s, m = p_step(s, b)\n"
      "  log.append(m)\n")
  assert [(f.line, f.kind, f.text) for f in result.findings
          if f.kind == Kind.PERSON] == [(17, Kind.PERSON, (
              "global step not written: output 1 of p_step is read as one "
              "value at line 15 and per device at line 17 "
              "(docs/MIGRATION.md#idiom-map)"))]


def test_a_name_of_two_layouts_names_the_line_reading_the_output():
  # plan.step_outputs records where output 0 is read per device (line 15):
  # the refusal of `s`, also replicated at 17, names it.
  head = HEAD.replace("  return jax.lax.pmean", "  return state, jax.lax.pmean")
  result = rewrite_global_source(
      head + "def run(s, b, log, flag):\n  s = jax_utils.replicate(s)\n"
      "  b = common_utils.shard(b)\n  s, m = p_step(s, b)\n"
      "  log.append(s)\n  if flag:\n    s = jax_utils.replicate(0.0)\n"
      "  return p_step(s, b)\n")
  person = [(f.line, f.text) for f in result.findings
            if f.kind == Kind.PERSON]
  assert person == [(18, (
      "global step not written: s holds values of different layouts here "
      "(bound at lines [14, 17]): place them alike by hand; the step's "
      "output is read per device at line(s) [15] (or handed on there), so "
      "it keeps pmap's stacked layout (docs/MIGRATION.md#idiom-map)"))]


def test_each_assigned_pmap_is_recorded_by_its_own_name_and_a_nested_one_left():
  # write/pmap_sites: `a` keeps its name when `b` is bound after it; the
  # pmap of a pmap is left whole, said in full.
  result = rewrite_global_source(
      "import jax\n\ndef f(x):\n  return x\n\na = jax.pmap(f, 'i')\n"
      "b = jax.pmap(f, 'i')\nc = jax.pmap(jax.pmap(f, 'j'), 'i')\n")
  assert [p.name for p in result.ports] == ["a", "b"]
  assert [(f.line, f.text) for f in result.findings
          if f.kind == Kind.PERSON][0] == (
              8, "a pmap inside a pmap, left whole: a 2-D mesh with both "
              "axes (docs/MIGRATION.md#nested-pmap)")


def test_a_step_returning_a_reduced_pair_through_the_helpers_views_it_whole():
  # The helpers stay (a removed put); pmap's out_axes=(0, 0) of two values
  # the step reduces over the axis: the written view reads each whole
  # (None), as the proof's adapters take the port's layout.
  result = rewrite_global_source(
      "import jax\nimport jax.numpy as jnp\n"
      "from flax.training import common_utils\n\n"
      "def train_step(state, batch):\n"
      "  loss = jax.lax.pmean(jnp.sum(batch), 'batch')\n"
      "  return state + 1, loss\n\n"
      "p_step = jax.pmap(train_step, axis_name='batch', out_axes=(0, 0))\n\n"
      "def run(state, batch):\n"
      "  state = jax.device_put_replicated(state, jax.local_devices())\n"
      "  state, loss = p_step(state, common_utils.shard(batch))\n"
      "  return state, loss[0]\n")
  (port,) = result.ports
  assert (port.in_axes, port.out_axes) == ((0, None), (None, None))
  assert "out_axes=(None, None)" in result.code


def test_an_output_put_whole_into_a_replace_and_read_per_device_names_both():
  # The line of the read that goes into `state.replace(...)` is the one
  # the finding names (and the place it is reported at is the later one).
  result = rewrite_global_source(
      "import jax\nimport jax.numpy as jnp\nfrom flax import jax_utils\n"
      "from flax.training import common_utils\n\n"
      "def train_step(state, batch):\n"
      "  return jax.lax.pmean(state.params + jnp.sum(batch), 'batch')\n\n"
      "p_step = jax.pmap(train_step, axis_name='batch')\n\n"
      "def run(state, batch):\n  state = jax_utils.replicate(state)\n"
      "  state = state.replace(params=p_step(state, "
      "common_utils.shard(batch)))\n"
      "  new = p_step(state, common_utils.shard(batch))\n"
      "  return state, new[1]\n")
  said = [(f.line, f.kind, f.text) for f in result.findings]
  assert (15, Kind.PERSON, "global step not written: output None of p_step "
          "is read as one value at line 13 and per device at line 15 "
          "(docs/MIGRATION.md#idiom-map)") in said
