"""`python -m compare.rewrite` on a program from before jax 0.10, which
placed its state and batches with `jax.device_put_replicated` and
`jax.device_put_sharded` (tests/rewrite_inputs/removed_puts.py).

jax 0.10 removed both: such a program stops at that line, its pmaps
rewritten or not. The first step replaces each call with a helper it
writes (`_pmap_put_replicated`, `_pmap_put_sharded`) and reports it. On
jax 0.9.2 (CI's second environment, `.ci/original_runtime.sh`) the
original runs and the rewrite must print its numbers; on jax 0.10 the
original stops, and the rewrite must print the numbers of the original run
with the in-line definitions chex and flax wrote for the two put back.
"""

import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from compare import rewrite
from compare._src.rewrite import rewrite_helpers

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "tests" / "rewrite_inputs" / "removed_puts.py"
# chex's and flax's in-line definitions (chex PR 440, flax 0.12.7), put
# back where jax 0.10 took the functions away: the original's reference.
REMOVED_BACK = '''
import jax, numpy as np, runpy, sys

def _sharding(devices):
  mesh = jax.sharding.Mesh(np.array(devices), ("_device_put_replicated",))
  return jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec("_device_put_replicated"))

jax.device_put_replicated = lambda x, devices: jax.tree.map(
    lambda v: jax.device_put(np.stack([v] * len(devices)),
                             _sharding(devices)), x)
jax.device_put_sharded = lambda shards, devices: jax.tree.map(
    lambda *vs: jax.device_put(np.stack(vs), _sharding(devices)), *shards)
runpy.run_path(sys.argv[1], run_name="__main__")
'''


def _run(*argv):
  env = {**os.environ, "XLA_FLAGS":
         "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
  return subprocess.run([sys.executable, *map(str, argv)], cwd=ROOT,
                        env=env, capture_output=True, text=True,
                        timeout=300, check=False)


def test_each_removed_call_is_rewritten_and_reported(tmp_path, capsys):
  port = tmp_path / "port.py"
  assert rewrite.main([str(PROGRAM), "-o", str(port)]) == 0
  out = capsys.readouterr().out
  changed = re.findall(r":(\d+): changed: removed in jax 0\.10: "
                       r"(jax\.device_put_\w+)\(\.\.\.\) -> (_pmap_put_\w+)",
                       out)
  assert changed == [("32", "jax.device_put_replicated",
                      "_pmap_put_replicated"),
                     ("39", "jax.device_put_sharded", "_pmap_put_sharded"),
                     ("40", "jax.device_put_sharded", "_pmap_put_sharded")]
  kept = re.findall(r":(\d+): kept: (_pmap_put_\w+)\(\.\.\.\): the (\w+ \w+)",
                    out)
  assert kept == [("32", "_pmap_put_replicated", "state copied"),
                  ("39", "_pmap_put_sharded", "batch reshaped"),
                  ("40", "_pmap_put_sharded", "batch reshaped")], out
  assert ("1 pmap(s) rewritten, 3 call(s) jax 0.10 removed rewritten, 0 "
          "place(s) need a person, 3 call site(s) keep") in out, out
  text = port.read_text()
  assert rewrite_helpers.PUT_HELPER in text
  program = rewrite_helpers.without_helpers(text)
  assert program.count("_pmap_put_replicated(") == 1
  assert program.count("_pmap_put_sharded(") == 2
  assert "jax.device_put_replicated(" not in program
  assert "jax.device_put_sharded(" not in program


def test_the_rewrite_prints_what_the_original_printed(tmp_path):
  port = tmp_path / "port.py"
  assert rewrite.main([str(PROGRAM), "-o", str(port)]) == 0
  ported = _run(port)
  assert ported.returncode == 0, ported.stderr[-2000:]
  original = _run(PROGRAM)
  if jax.__version_info__ < (0, 10):
    assert original.returncode == 0, original.stderr[-2000:]
  else:
    assert original.returncode != 0
    assert ("AttributeError: jax.device_put_replicated is deprecated"
            in original.stderr), original.stderr[-2000:]
    shim = tmp_path / "removed_back.py"
    shim.write_text(REMOVED_BACK)
    original = _run(shim, PROGRAM)
    assert original.returncode == 0, original.stderr[-2000:]
  assert original.stdout.count("\n") == 4
  assert ported.stdout == original.stdout


def test_global_from_the_original_or_the_first_step_runs_the_same(
    tmp_path, capsys):
  first = tmp_path / "port.py"
  assert rewrite.main([str(PROGRAM), "-o", str(first)]) == 0
  from_original, from_first = tmp_path / "g1.py", tmp_path / "g2.py"
  assert rewrite.main([str(PROGRAM), "-o", str(from_original),
                       "--global"]) == 0
  assert rewrite.main([str(first), "-o", str(from_first), "--global"]) == 0
  # The one call site moved: `float(value[0])` of the value the step
  # pmeans, one value now (`float(value)`).
  assert capsys.readouterr().out.count(
      "1 pmap(s) rewritten to global arrays, 3 call(s) jax 0.10 removed "
      "rewritten, 1 call site(s) moved to global arrays, 0 place(s) need a "
      "person") == 2
  assert "float(value)" in from_first.read_text()
  assert from_original.read_text() == from_first.read_text()
  assert rewrite_helpers.PUT_HELPER in from_first.read_text()
  assert _run(from_first).stdout == _run(first).stdout


def _helpers():
  namespace = {}
  exec("import functools\nimport jax\nimport numpy as np\n"  # pylint: disable=exec-used
       + rewrite_helpers.HELPERS + rewrite_helpers.PUT_HELPER, namespace)
  return namespace


@pytest.mark.parametrize("order", [1, -1])
def test_row_i_lies_on_the_i_th_device_given(order):
  devices = jax.local_devices()[::order]
  put = _helpers()
  tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3),
          "n": np.int32(7), "h": np.ones((2,), jax.numpy.bfloat16)}
  replicated = put["_pmap_put_replicated"](tree, devices)
  shards = [jax.tree.map(lambda v, i=i: v + i, tree)
            for i in range(len(devices))]
  sharded = put["_pmap_put_sharded"](shards, devices)
  for stacked, row_of in ((replicated, lambda leaf, i: leaf),
                          (sharded, lambda leaf, i: leaf + i)):
    assert jax.tree.structure(stacked) == jax.tree.structure(tree)
    for leaf, want in zip(jax.tree.leaves(stacked), jax.tree.leaves(tree)):
      assert leaf.shape == (len(devices), *np.shape(want))
      assert leaf.dtype == np.asarray(want).dtype
      # Row i of the stacked array is the i-th value, and it is the shard
      # of the i-th device: pmap maps over the devices in that order.
      for i in range(len(devices)):
        np.testing.assert_array_equal(np.asarray(leaf)[i],
                                      np.asarray(row_of(want, i)))
      for shard in leaf.addressable_shards:
        assert shard.device == devices[shard.index[0].start]
        assert shard.data.shape[0] == 1


ONLY_PUT = '''import jax


def place(state):
  return jax.device_put_replicated(state, jax.local_devices())
'''


def test_a_file_with_no_pmap_is_rewritten_and_global_says_why_not(
    tmp_path, capsys):
  source, port = tmp_path / "place.py", tmp_path / "place_port.py"
  source.write_text(ONLY_PUT)
  assert rewrite.main([str(source), "-o", str(port)]) == 0
  out = capsys.readouterr().out
  assert ("0 pmap(s) rewritten, 1 call(s) jax 0.10 removed rewritten, 0 "
          "place(s) need a person") in out, out
  assert "_pmap_put_replicated(state, jax.local_devices())" in (
      port.read_text())
  # The second step: nothing of this file's is a step; its value goes to a
  # pmap elsewhere, so the place is named, not passed over (was a crash).
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 1
  out = capsys.readouterr().out
  assert re.search(r"place\.py:5: NEEDS A PERSON: global step not written: "
                   r"no pmap in this file takes what this call places", out)
  assert "_pmap_put_replicated(state" in port.read_text()


def test_a_removed_function_used_as_a_value_is_left_to_a_person(capsys,
                                                                 tmp_path):
  source, port = tmp_path / "alias.py", tmp_path / "alias_port.py"
  source.write_text("import jax\n\nput = jax.device_put_sharded\n"
                    "state = jax.device_put_replicated(0, jax.devices())\n")
  assert rewrite.main([str(source), "-o", str(port)]) == 1
  out = capsys.readouterr().out
  assert re.search(r"alias\.py:3: NEEDS A PERSON: a function jax 0\.10 "
                   r"removed, used as a value", out), out
  assert "alias.py:4: NEEDS A PERSON" not in out
  assert "1 place(s) need a person" in out


def test_two_removed_functions_used_as_values_are_each_left_to_a_person(
    capsys, tmp_path):
  # Each value is a place of its own: the second is named as the first is.
  source, port = tmp_path / "aliases.py", tmp_path / "aliases_port.py"
  source.write_text("import jax\n\nrep = jax.device_put_replicated\n"
                    "state = jax.device_put_replicated(0, jax.devices())\n"
                    "put = jax.device_put_sharded\n")
  assert rewrite.main([str(source), "-o", str(port)]) == 1
  out = capsys.readouterr().out
  valued = re.findall(r"aliases\.py:(\d+): NEEDS A PERSON: a function jax "
                      r"0\.10 removed, used as a value", out)
  assert valued == ["3", "5"], out
  assert "2 place(s) need a person" in out, out


SUBSET = '''import jax


def place(state, shards):
  return (jax.device_put_replicated(state, jax.local_devices()[:4]),
          jax.device_put_sharded(shards, jax.local_devices()[-1:3:-1]))
'''


def test_a_subset_of_the_devices_gets_one_row_each_in_order(tmp_path,
                                                             capsys):
  # Four of the eight devices (the last four, backwards, for the shards):
  # four rows, row i on the i-th device given, as pmap's stacked arrays.
  source, port = tmp_path / "subset.py", tmp_path / "subset_port.py"
  source.write_text(SUBSET)
  assert rewrite.main([str(source), "-o", str(port)]) == 0
  assert "2 call(s) jax 0.10 removed rewritten" in capsys.readouterr().out
  namespace = {}
  exec(compile(port.read_text(), str(port), "exec"), namespace)  # pylint: disable=exec-used
  state = np.arange(3, dtype=np.float32)
  shards = [state + i for i in range(4)]
  replicated, sharded = namespace["place"](state, shards)
  for stacked, devices, row in (
      (replicated, jax.local_devices()[:4], lambda i: state),
      (sharded, jax.local_devices()[-1:3:-1], lambda i: shards[i])):
    assert stacked.shape == (4, 3)
    np.testing.assert_array_equal(np.asarray(stacked),
                                  np.stack([row(i) for i in range(4)]))
    assert len(stacked.addressable_shards) == 4
    for shard in stacked.addressable_shards:
      assert shard.device == devices[shard.index[0].start]
      assert shard.data.shape[0] == 1
