"""flax NNX's and equinox's pmaps written, unit by unit (issue 73).

Each test rewrites a small program in-process (`pipeline.rewrite_source`
or `rewrite_global_source`), no program run: the names the port takes
where the file uses the first ones, the findings' texts in full, a removed
put where no pmap is ported, an import made where the file has none at the
top, the arity of a function with `*args`, a called pmap's function from
outside the file, equinox imported by name, a decorator within 79 columns.
The programs themselves run in tests/test_rewrite_nnx_equinox.py; the
mutants these pin: docs/mutation-testing.md (2026-12-08).
"""

from compare._src.rewrite import pipeline
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject

_HEAD = "import jax\nfrom flax import nnx\n\n\n"
# A step with its model broadcast and its batch mapped, and a call of it.
_STEP = ("@nnx.pmap(axis_name='i', in_axes=(None, 0), out_axes=None)\n"
         "def f(m, x):\n  return m(x)\n")
# What the first step says of a ported nnx step over axis 'i'.
_PORTED = ("nnx.pmap -> nnx.jit over a shard_map on a 1-D mesh 'i' of every "
           "device: in_specs (jax.P(), jax.P(\"i\")), out_specs jax.P(), "
           "check_vma=False as pmap runs")
_KEEPS = ("; call sites keep pmap's stacked [devices, ...] arguments (the "
          "body takes its device's block)")


def _rewritten(text, global_step=False):
  write = (pipeline.rewrite_global_source if global_step
           else pipeline.rewrite_source)
  return write(text, "prog.py")


def _said(result):
  return [(f.line, f.kind, f.text) for f in result.findings]


def test_the_port_takes_the_next_free_mesh_and_sharding_names():
  text = (_HEAD + "mesh = device_mesh = batch_sharding = 1\n\n\n" + _STEP
          + "\n\ny = f(m, x)\n")
  code = _rewritten(text, global_step=True).code
  assert "pmap_axis_mesh = jax.sharding.Mesh(" in code
  assert ('rows_sharding = jax.NamedSharding(pmap_axis_mesh, jax.P("i"))'
          in code)
  assert "make_array_from_process_local_data(rows_sharding," in code


def test_the_first_step_says_in_full_what_it_wrote_and_what_it_kept():
  result = _rewritten(_HEAD + _STEP + "\n\ny = f(m, x)\nz = f(m, x=x)\n")
  assert _said(result) == [
      (5, Kind.CHANGED, _PORTED + _KEEPS),
      (10, Kind.KEPT, "f(...): argument(s) [1] keep pmap's stacked "
       "[devices, ...] layout"),
      (11, Kind.PERSON, "f is called with keyword or starred arguments: the "
       "port's in_specs name its positional arguments (nnx.shard_map fails "
       "on this call, equinox's filter_shard_map takes none); pass them by "
       "position")]


def test_the_global_step_says_in_full_why_it_is_not_written():
  unbound = _rewritten(_HEAD + "def g(m, x):\n  return m(x)\n\n\n"
                       "y = nnx.pmap(g, axis_name='i', in_axes=(None, 0), "
                       "out_axes=None)(m, x)\n", global_step=True)
  assert [(f.line, f.text) for f in unbound.findings
          if f.subject == Subject.NOT_GLOBAL] == [
              (9, "global step not written: a pmap bound to no name here "
               "(returned, passed on, or called where it is made): its "
               "callers' layouts are not in view")]
  value = _rewritten(_HEAD + _STEP + "\n\ny = f(m, x)\nsteps = [f]\n",
                     global_step=True)
  assert [(f.line, f.text) for f in value.findings
          if f.subject == Subject.NOT_GLOBAL] == [
              (11, "global step not written: f is read here as a value, not "
               "called: the global layout of its arguments is not in view")]


def test_a_decorated_steps_own_name_is_no_read_of_it_as_a_value():
  result = _rewritten(_HEAD + _STEP + "\n\ny = f(m, x)\n", global_step=True)
  assert [f.subject for f in result.findings] == [Subject.PMAP,
                                                  Subject.CALL_SITE]
  assert "make_array_from_process_local_data(" in result.code


def test_a_pmap_used_as_a_value_is_named_in_full():
  result = _rewritten(_HEAD + "step = nnx.pmap\n")
  assert _said(result) == [(5, Kind.PERSON, "nnx.pmap used as a value (not "
                            "called or a decorator): port it by hand")]


def test_a_removed_put_is_written_where_no_pmap_is_ported():
  text = (_HEAD + "@nnx.pmap(in_axes=(nnx.StateAxes({...: None}), 0))\n"
          "def f(m, x):\n  return m(x)\n\n\n"
          "copies = jax.device_put_replicated(m, jax.local_devices())\n")
  result = _rewritten(text)
  # Nothing else written: no mesh, no import (no step is ported).
  assert result.code == text.replace(
      "jax.device_put_replicated(m, jax.local_devices())",
      "jax.tree.map(\n    lambda a: jax.numpy.stack([a] * "
      "len(jax.local_devices())),\n    m)")
  assert [(f.line, f.kind) for f in result.findings] == [
      (5, Kind.PERSON), (10, Kind.CHANGED)]
  assert result.findings[1].text == (
      "removed in jax 0.10: jax.device_put_replicated(...) -> the same "
      "stacked copies, one per device (jax.numpy.stack), placed by the "
      "step's jit")


def test_a_removed_put_it_cannot_write_is_named_in_full():
  text = (_HEAD + _STEP + "\n\nc = jax.device_put_sharded(xs, devices)\n"
          "d = jax.device_put_replicated(m, devices=devices)\n")
  result = _rewritten(text)
  assert "c = jax.device_put_sharded(xs, devices)\n" in result.code
  assert _said(result)[1:] == [
      (line, Kind.PERSON, f"jax.device_put_{kind} (removed in jax 0.10) "
       "here: stack the copies by hand (docs/MIGRATION.md#staged)")
      for line, kind in ((10, "sharded"), (11, "replicated"))]


def test_a_pmap_imported_by_name_below_the_top_gets_its_import_first():
  # No line of the file starts with an import: the library's goes first.
  text = ("try:\n  from flax.nnx import pmap\nexcept ImportError:\n"
          "  pmap = None\n\n\n@pmap(axis_name='i', in_axes=(None, 0), "
          "out_axes=None)\ndef f(m, x):\n  return m(x)\n")
  code = _rewritten(text).code
  assert code.startswith("import flax.nnx\n")
  assert "@flax.nnx.jit\n@flax.nnx.shard_map(mesh=mesh," in code


def test_a_function_taking_star_args_has_no_arity_to_map():
  result = _rewritten(_HEAD + "def f(x, *rest):\n  return x\n\n\n"
                      "step = nnx.pmap(f, axis_name='i')\n")
  assert result.code.endswith("step = nnx.pmap(f, axis_name='i')\n")
  assert _said(result) == [(9, Kind.PERSON, (
      "f is mapped with in_axes=0 but its parameters are not in this file: "
      "give in_axes one axis per argument, or port it by hand"))]


def test_a_called_pmap_without_its_function_is_named_at_its_line():
  result = _rewritten(_HEAD + "\nstep = nnx.pmap(axis_name='i')\n")
  assert _said(result) == [(6, Kind.PERSON, "nnx.pmap(...) without the "
                            "function (line 6): port it by hand")]


def test_a_function_from_another_module_is_mapped_by_its_in_axes():
  result = _rewritten(_HEAD + "import other\n\nstep = nnx.pmap(other.f, "
                      "axis_name='i', in_axes=(None, 0), out_axes=None)\n")
  assert "lambda a0, a1: other.f(" in result.code
  assert "jax.tree.map(lambda a: a[0], a1)" in result.code
  assert _said(result) == [(7, Kind.CHANGED, _PORTED + _KEEPS)]


def test_equinox_imported_by_name_views_its_arrays_by_the_modules_name():
  text = ("import jax\nfrom equinox import filter_pmap\n\n\n"
          "def f(m, x):\n  return m(x)\n\n\nstep = filter_pmap(f, "
          "axis_name='i', in_axes=(None, 0), out_axes=None)\n")
  code = _rewritten(text).code
  assert ("jax.tree.map(lambda a: a[0] if equinox.is_array(a) else a, a1)"
          in code)
  assert "step = equinox.filter_jit(filter_shard_map(" in code


def test_an_equinox_steps_decorator_fits_in_79_columns():
  # With the "@", a decorator packed to 79 would be 80 on this axis.
  text = ("import equinox as eqx\nimport jax\n\n\n@eqx.filter_pmap("
          "axis_name='aa', in_axes=(None, 0), out_axes=None)\n"
          "def f(m, x):\n  return m(x)\n")
  code = _rewritten(text).code
  assert ("@functools.partial(filter_shard_map, mesh=mesh,\n"
          "    in_specs=(jax.P(), jax.P(\"aa\")), out_specs=jax.P())"
          in code)
  decorator = code.split("@functools.partial", 1)[1].split("\ndef f", 1)[0]
  assert max(len(line) for line in ("@functools.partial" + decorator)
             .splitlines()) <= 79


def test_a_step_returning_its_mapped_output_twice_is_named_in_full():
  text = (_HEAD + "@nnx.pmap(axis_name='i')\ndef f(x):\n  if x:\n"
          "    return x\n  return x * 2\n")
  result = _rewritten(text)
  assert result.code == text
  assert _said(result) == [(5, Kind.PERSON, (
      "f returns an output mapped over the devices (out_axes 0) from more "
      "than one return, or not as a tuple: pmap stacks it per device; port "
      "it by hand"))]


def test_a_called_pmap_mapping_some_outputs_only_is_named_in_full():
  text = (_HEAD + "def g(m, x):\n  return m(x)\n\n\nstep = nnx.pmap(g, "
          "axis_name='i', in_axes=(None, 0), out_axes=(0, None))\n")
  result = _rewritten(text)
  assert result.code == text
  assert _said(result) == [(9, Kind.PERSON, (
      "a called pmap with out_axes mapping some outputs only: pmap stacks "
      "those per device; decorate the function, or port it by hand"))]


def test_a_called_pmap_maps_its_function_as_written_where_no_view_is_due():
  # Nothing mapped in or out (the first step), or the global step: no
  # per-device view, no lambda.
  def call(in_axes):
    return ("def g(m, x):\n  return m(x)\n\n\nstep = nnx.pmap(g, "
            f"axis_name='i', in_axes={in_axes}, out_axes=None)\n"
            "y = step(m, x)\n")
  for text, global_step in ((call("(None, None)"), False),
                            (call("(None, 0)"), True)):
    code = _rewritten(_HEAD + text, global_step).code
    assert "step = nnx.jit(nnx.shard_map(g, mesh=mesh," in code
    assert "lambda a0" not in code
    assert "check_vma=False))\ny = step(" in code  # no donation: no comma


def test_split_rngs_over_a_pmap_is_named_in_full():
  text = (_HEAD + "@nnx.split_rngs(splits=8)\n@nnx.pmap(axis_name='i')\n"
          "def f(m, x):\n  return m(x)\n")
  result = _rewritten(text)
  assert result.code == text
  assert _said(result) == [(6, Kind.PERSON, (
      "nnx.split_rngs (line 5) gives each device its own key under "
      "nnx.pmap: under nnx.shard_map the split keys come as blocks that "
      "keep their axis; port it by hand (docs/MORE-IDIOMS.md#nnx)"))]


def test_the_global_steps_call_keeps_its_unmapped_arguments_on_one_line():
  text = (_HEAD + "@nnx.pmap(axis_name='i', in_axes=(None, None, 0), "
          "out_axes=None)\ndef f(m, n, x):\n  return m(x)\n\n\n"
          "y = f(m, n, x)\n")
  result = _rewritten(text, global_step=True)
  assert result.code.endswith(
      "y = f(\n    m, n,\n    jax.make_array_from_process_local_data("
      "batch_sharding, jax.tree.map(\n        lambda a: a.reshape(-1, "
      "*a.shape[2:]), x)))\n")
  assert _said(result)[1] == (10, Kind.CHANGED, (
      "f(...): argument(s) [2] made global batches where the step is called "
      "(each process's stacked [devices, rows, ...] flattened into its "
      "rows), the body as written"))


def test_a_keyword_call_says_in_full_why_the_global_step_is_not_written():
  text = _HEAD + _STEP + "\n\ny = f(m, x=x)\n"
  result = _rewritten(text, global_step=True)
  assert [(f.line, f.text) for f in result.findings
          if f.subject == Subject.NOT_GLOBAL] == [
              (10, "global step not written: f is called with keyword or "
               "starred arguments: the global step places positional ones")]


def test_the_port_takes_device_mesh_where_only_mesh_is_taken():
  code = _rewritten(_HEAD + "mesh = 1\n\n\n" + _STEP).code
  assert "device_mesh = jax.sharding.Mesh(" in code
  assert "@nnx.shard_map(mesh=device_mesh," in code


def test_a_program_that_joins_is_told_in_full_to_make_the_mesh_after():
  text = _HEAD + "jax.distributed.initialize()\n\n\n" + _STEP
  result = _rewritten(text)
  assert result.code == text
  assert _said(result) == [(5, Kind.PERSON, (
      "the program joins jax.distributed here: the port's mesh is built at "
      "import, before the join (its devices would be this process's alone, "
      "and jax could not join after); port it by hand with the mesh made "
      "after the join (docs/MANY-HOSTS.md)"))]
