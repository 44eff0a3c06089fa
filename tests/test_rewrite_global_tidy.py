"""`--global` names what it leaves dead or stale, and sets aside a pmap in a
function the file never calls (issue 58).

The tutorial's `split` and `n_devices` fed pmap's stacked layout only:
main's own names, which no code out of view can read, they are removed
and said so (`changed`); a module's dead names, a decorated def, a value
whose making may do more (another call) stay, named by line (`left`), as
do the comments about the extra leading dimension. Names still read and
the step's own comments (a device's view, still true in shard_map) are
not named. flax lm1b's `per_host_sum_pmap`, never called, no
longer refuses the file: the rest is rewritten and the function named.
"""

import pathlib
import re
import types

import libcst as cst
import pytest

from compare import rewrite
from compare._src.rewrite.write import global_written
from compare._src.rewrite import pipeline
from tests.test_rewrite import _script_output
from tests.test_rewrite_global import assert_idiomatic  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
TUTORIAL = INPUTS / "tutorial_linear_regression.py"


def _left(findings) -> dict:
  return {f.line: f.text for f in findings if f.kind == "left"}


def _removed(findings) -> dict:
  return {f.line: re.match(r"dead local removed: (\w+):", f.text)[1]
          for f in findings
          if f.kind == "changed" and f.text.startswith("dead local")}


def _dead_left(findings) -> dict:
  return {line: re.match(r"(\w+) is no longer used", text)[1]
          for line, text in _left(findings).items()
          if "no longer used" in text}


def test_the_tutorials_dead_locals_go_and_its_stale_comments_are_named():
  written = pipeline.rewrite_global_source(TUTORIAL.read_text())
  # `n_devices` goes in the round after `split`, its only reader.
  assert _removed(written.findings) == {73: "n_devices", 77: "split"}
  assert _dead_left(written.findings) == {}
  assert "def split" not in written.code
  assert "n_devices" not in written.code
  # Its comment went with it ("chunks for each device", line 76).
  assert "# Split the data into chunks" not in written.code
  left = _left(written.findings)
  stale = {line for line, text in left.items() if "stale" in text}
  # "replicate across devices", "the same on every device", "an extra
  # leading dimension", "the first device".
  assert stale == {71, 88, 92, 93}
  # The negative controls: names still read, and the step's own comment
  # ("individually on each device", line 47: still each device's view).
  assert 47 not in left and not any(
      re.match(r"(xs|ys|params|replicated_params|loss) ", t)
      for t in left.values())


def test_a_name_still_read_is_not_dead():
  # `n_devices` read once more after the rewrite: no longer dead, while
  # `split` still is.
  source = TUTORIAL.read_text().replace(
      '  print(f"w {float(params.weight)!r}',
      '  print(n_devices)\n  print(f"w {float(params.weight)!r}')
  written = pipeline.rewrite_global_source(source)
  assert _removed(written.findings) == {77: "split"}
  assert _dead_left(written.findings) == {}
  assert "n_devices = jax.local_device_count()" in written.code


SPLIT = '''
  # Split the data into chunks for each device.
  def split(arr):
    """Splits the first axis of `arr` evenly across the number of devices."""
    return arr.reshape(n_devices, arr.shape[0] // n_devices, *arr.shape[1:])
'''


def test_a_modules_dead_def_stays_named():
  source = TUTORIAL.read_text()
  assert SPLIT in source
  source = source.replace(SPLIT, "").replace(
      "\n\n# So far, the code", "\n\nn_devices = jax.local_device_count()\n"
      + SPLIT.replace("\n  ", "\n") + "\n\n# So far, the code")
  written = pipeline.rewrite_global_source(source)
  assert _removed(written.findings) == {}
  assert set(_dead_left(written.findings).values()) == {"split", "n_devices"}
  assert "def split" in written.code


@pytest.mark.parametrize("change, stays", [
      # A value whose making calls more than a device count: it may do
      # something besides (here it does not, and it stays all the same).
      (("n_devices = jax.local_device_count()",
        "n_devices = len(jax.local_devices())"), "n_devices"),
      # A decorated def: the decorator runs at the def; and the name it
      # reads stays with it.
      (("  def split(arr):", "  @functools.lru_cache\n  def split(arr):"),
       "split")])
def test_a_dead_local_that_may_do_more_stays_named(change, stays):
  source = TUTORIAL.read_text().replace(*change)
  written = pipeline.rewrite_global_source(source)
  removed = _removed(written.findings)
  left = _dead_left(written.findings)
  assert stays in left.values() and stays not in removed.values()
  assert {*removed.values(), *left.values()} == {"split", "n_devices"}
  assert change[1].strip() in written.code


UNCALLED = '''

def per_host_sum_pmap(in_tree):
  """Execute psum on in_tree's leaves over one device per host."""
  host2devices = collections.defaultdict(list)
  for d in jax.devices():
    host2devices[d.process_index].append(d)
  devices = [host2devices[k][0] for k in host2devices]
  host_psum = jax.pmap(lambda x: jax.lax.psum(x, "i"), "i", devices=devices)

  def pre_pmap(xs):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (1,) + x.shape), xs)

  def post_pmap(xs):
    return jax.tree.map(lambda x: x[0], xs)

  return post_pmap(host_psum(pre_pmap(in_tree)))
'''


def _with_uncalled(tmp_path, call=""):
  source = (INPUTS / "flax_style_train.py").read_text()
  at = source.index("\n\nif __name__")
  program = tmp_path / "lm1b_like.py"
  program.write_text("import collections\n" + source[:at] + UNCALLED + call
                     + source[at:])
  return program


def test_a_pmap_in_a_function_never_called_is_set_aside(tmp_path, capsys):
  source = _with_uncalled(tmp_path)
  port = tmp_path / "port.py"
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert re.search(r"lm1b_like\.py:\d+: left: per_host_sum_pmap is never "
                   r"called in this file: its pmap \(line\(s\) \[\d+\]\)",
                   out), out
  assert "0 place(s) need a person" in out
  text = port.read_text()
  assert UNCALLED in text  # as written, its pmap with it
  assert "_pmap_" not in text
  assert text.count("jax.pmap(") == 1
  assert _script_output(port) == _script_output(source)


def test_the_same_function_called_still_refuses_the_file(tmp_path, capsys):
  # The negative control: called, its pmap is the program's, and over
  # given devices the global step cannot take it.
  source = _with_uncalled(tmp_path, "\n\nTOTAL = per_host_sum_pmap\n")
  port = tmp_path / "port.py"
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 1
  out = capsys.readouterr().out
  assert "never called" not in out
  assert "NEEDS A PERSON: global step not written" in out


def _reduced(body):
  fn = cst.parse_module(body).body[0]
  return global_written.reduced_outputs(fn)


def test_an_output_the_step_reduces_is_known_by_its_last_binding():
  assert _reduced("def f(p, x):\n  l, g = h(p, x)\n"
                  "  l = jax.lax.pmean(l, 'i')\n  return p, l\n") == {1}
  assert _reduced("def f(x):\n  return lax.psum(x, 'i')\n") == {None}
  # Rebound after the pmean, bound in an `if`, or each device's own.
  assert _reduced("def f(x):\n  l = jax.lax.pmean(x, 'i')\n  l = l * 2\n"
                  "  return x, l\n") == set()
  assert _reduced("def f(x, c):\n  l = x\n  if c:\n"
                  "    l = jax.lax.pmean(x, 'i')\n  return x, l\n") == set()
  assert _reduced("def f(x):\n  return x, x.mean()\n") == set()


def test_the_tutorial_reads_its_pmeaned_loss_as_one_value(tmp_path, capsys):
  port = tmp_path / "port.py"
  assert rewrite.main([str(TUTORIAL), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "loss[0] of a value the step reduces over the axis" in out
  # The counts say what the lines above say: the two dead locals removed
  # are not call sites moved.
  assert ("1 pmap(s) rewritten to global arrays, 5 call site(s) moved to "
          "global arrays, 0 place(s) need a person, 1 call site(s) keep "
          "pmap's stacked layout (values made or read per device), 2 dead "
          "local name(s) removed") in out
  assert len(re.findall(r": changed: dead local removed: ", out)) == 2
  text = port.read_text()
  assert "float(loss)" in text and "loss[0]" not in text
  assert "out_specs=jax.P()" in text
  assert_idiomatic(TUTORIAL, port)
  # No wait in the program; the report says where a CPU test waits.
  assert "jax.block_until_ready(out)" in out
  assert "docs/REWRITE.md#cpu-wait" in out


def test_a_file_keeping_the_helpers_is_told_why_and_waits_as_before(
    tmp_path, capsys):
  # The negative control: a program whose join can be skipped by an early
  # return (the mesh set after it would not be set on that path); its
  # helpers build the mesh at the first call and wait on CPU.
  source = tmp_path / "joined.py"
  source.write_text((INPUTS / "multihost_tutorial.py").read_text().replace(
      '  if "COORDINATOR" in os.environ:\n',
      '  if "COORDINATOR" not in os.environ:\n    return\n  if True:\n'))
  port = tmp_path / "port.py"
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 0
  out = capsys.readouterr().out
  assert "kept: the first step's helpers stay in this file: join can " \
      "return before its join" in out
  assert "docs/REWRITE.md#cpu-wait" not in out
  assert "_pmap_call(" in port.read_text()


def test_the_hand_written_port_prints_the_tutorials_numbers():
  """docs/REWRITE.md shows it beside the tool's output: it must be a port."""
  expert = INPUTS / "tutorial_expert_port.py"
  assert "_pmap_" not in expert.read_text()
  assert _script_output(expert) == _script_output(TUTORIAL)


def test_the_written_mesh_holds_pmaps_devices_in_pmaps_order():
  """On many processes pmap's axis runs over every process's devices, each
  process's together, in process order (`_pmap_mesh`): the module-level
  mesh's device list, evaluated on devices whose ids interleave the
  processes, is that list."""
  block = global_written.mesh_block('"i"', {"mesh": "mesh"})
  listed = re.search(r"Mesh\(\s*(.*), \(\"i\",\)\)", block, re.S)[1]
  devices = [types.SimpleNamespace(id=i, process_index=p)
             for i, p in enumerate([1, 0, 1, 0, 2, 2, 0, 1])]

  def local_devices(process_index=0):
    return [d for d in devices if d.process_index == process_index]

  jax = types.SimpleNamespace(devices=lambda: list(devices),
                              local_devices=local_devices,
                              process_count=lambda: 3)
  pmaps = [d for p in range(3) for d in local_devices(process_index=p)]
  assert eval(listed, {"jax": jax}) == pmaps  # pylint: disable=eval-used
