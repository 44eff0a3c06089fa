"""`python -m compare.rewrite`, through its public names only.

Its inputs: the pmap tutorial's linear regression as the tutorial writes it
and a flax-examples-style script (each prints the same after the rewrite),
our own pmap programs (each rewritten module trains bitwise as the original)
and examples/resnet (proved with `--prove`); each unsafe pattern reported by
line with its reason and exit 1; bad input exit 2 with nothing written.
"""

import functools
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from compare import rewrite
from shardport import strategies
from tests import helpers

ROOT = pathlib.Path(__file__).resolve().parents[1]
INPUTS = ROOT / "tests" / "rewrite_inputs"


def _rewrite(*argv, capsys=None):
  code = rewrite.main([str(a) for a in argv])
  return code, (capsys.readouterr() if capsys else None)


@functools.lru_cache(maxsize=None)
def _script_output(path):
  """A script's stdout on 8 devices (each file run once per process: the
  originals are compared with several rewrites)."""
  return _run_script(path)


def _run_script(path):
  env = {**os.environ, "XLA_FLAGS":
         "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
  done = subprocess.run([sys.executable, str(path)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300,
                        check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  return done.stdout


@pytest.mark.parametrize("script", ["tutorial_linear_regression",
                                    "flax_style_train"])
def test_a_script_prints_the_same_after_the_rewrite(script, tmp_path,
                                                    capsys):
  source, port = INPUTS / f"{script}.py", tmp_path / f"{script}_port.py"
  code, out = _rewrite(source, "-o", port, capsys=capsys)
  assert code == 0, out.out
  text = port.read_text()
  assert "jax.pmap" not in text and "jax.shard_map(" in text
  assert "check_vma=False" in text
  assert f"{source}:" in out.out and "changed: pmap over" in out.out
  assert _script_output(port) == _script_output(source)


def _load(path):
  spec = importlib.util.spec_from_file_location(f"rewritten_{path.stem}",
                                                path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("name", ["data_parallel", "ensemble",
                                  "accumulation"])
def test_our_pmap_programs_train_bitwise_after_the_rewrite(name, digits,
                                                           tmp_path):
  source = ROOT / "legacy_pmap" / f"{name}.py"
  port = tmp_path / f"{name}.py"
  assert rewrite.main([str(source), "-o", str(port)]) == 0
  strategy = strategies.get(name)
  # The rewrite is of the program's code; the model is its config's
  # (linreg where the program trains it: the CNN compiled for 15 s more).
  options = {"steps": 3, "global_batch": 64}
  if "linreg" in strategy.workloads:
    options["workload"] = "linreg"
  config = strategy.make_config(options, digits)
  calls = strategy.calls_per_step(config, "pmap")
  original = helpers.run(importlib.import_module(f"legacy_pmap.{name}"),
                         "pmap", config, digits, 8, calls=calls)
  rewritten = helpers.run(_load(port), "pmap", config, digits, 8,
                          calls=calls)
  helpers.assert_bitwise(rewritten.host, original.host)


def test_the_resnet_rewrite_is_proved(tmp_path, capsys):
  code, out = _rewrite(ROOT / "examples/resnet/train_pmap.py", "-o",
                       tmp_path / "train_port.py", "--prove",
                       "examples.resnet.prove:port", "--steps", "2",
                       capsys=capsys)
  assert code == 0, out.out[-3000:]
  assert "port vs pmap          lockstep   bitwise" in out.out
  assert re.search(r"verdict: pass \(\d+ of \d+ leaves judged\)$",
                   out.out.rstrip())
  # The table counts the written step's own collectives and bytes, not the
  # proof's adapter around it (a stack and an x[0] per leaf: 32 all-reduces
  # where pmap's step runs 11, before the adapter was left out).
  rows = {line.split()[0]: line.split()[-5:-1]
          for line in out.out.splitlines()
          if line.startswith(("pmap ", "port ")) and "by step" not in line}
  assert rows["port"] == rows["pmap"], rows


UNSAFE = {
    "dynamic static_broadcasted_argnums": (
        "f = jax.pmap(g, 'i', static_broadcasted_argnums=STATIC)\n",
        "static_broadcasted_argnums: `STATIC` is not a literal"),
    "dynamic in_axes": ("f = jax.pmap(g, 'i', in_axes=AXES)\n",
                        "in_axes/out_axes: `AXES` is not a literal"),
    "an axis other than 0": ("f = jax.pmap(g, 'i', in_axes=(1, 0))\n",
                             "an axis of 1"),
    "pmap as a value": ("mapper = jax.pmap\n", "used as a value"),
    "an unknown axis": ("f = jax.pmap(g, 'i')\n"
                        "def h(x):\n  return jax.lax.psum(x, 'j')\n",
                        "psum over 'j', an axis no pmap of this file names"),
    "nested pmap": ("f = jax.pmap(jax.pmap(g, 'j'), 'i')\n",
                    "a pmap inside a pmap"),
    "beside other decorators": ("@jax.jit\n@jax.pmap\ndef f(x):\n  return x\n",
                                "beside other decorators"),
    "nnx.pmap": ("from flax import nnx\nf = jax.pmap(g, 'i')\n"
                 "p = nnx.pmap(g, axis_name='i')\n", "nnx.pmap"),
}


@pytest.mark.parametrize("case", list(UNSAFE))
def test_each_unsafe_pattern_is_reported_by_line(case):
  body, reason = UNSAFE[case]
  source = "import jax\n\n" + body
  result = rewrite.rewrite_source(source)
  person = [f for f in result.findings if f.kind == "person"]
  assert result.needs_a_person
  assert any(reason in f.text for f in person), person
  line = next(f.line for f in person if reason in f.text)
  assert source.splitlines()[line - 1].strip(), line
  compile(result.code, "rewritten.py", "exec")  # what is written parses


def test_something_left_to_a_person_exits_1_and_is_still_written(
    tmp_path, capsys):
  source = tmp_path / "mixed.py"
  source.write_text("import jax\n\nf = jax.pmap(g, 'i')\n"
                    "h = jax.pmap(g, 'i', in_axes=AXES)\n")
  port = tmp_path / "out.py"
  code, out = _rewrite(source, "-o", port, capsys=capsys)
  assert code == 1
  assert f"{source}:4: NEEDS A PERSON: in_axes/out_axes" in out.out
  assert f"{source}:3: changed" in out.out
  assert "jax.shard_map(" in port.read_text()


def test_comments_and_the_rest_of_the_file_survive():
  source = (INPUTS / "tutorial_linear_regression.py").read_text()
  code = rewrite.rewrite_source(source).code
  kept = [line for line in source.splitlines() if "jax.pmap" not in line]
  assert all(line in code.splitlines() for line in kept)
  assert "# Combine the gradient across all devices" in code


@pytest.mark.parametrize("make, message", [
    (lambda d: (d / "a.txt", "this is not python (", d / "o.py"),
     "is not Python"),
    (lambda d: (d / "a.py", "import jax\nx = 1\n", d / "o.py"),
     "no jax.pmap found"),
    (lambda d: (d / "a.py", "f = jax.pmap(g, 'i')\n", d / "no" / "o.py"),
     "-o: cannot write in"),
    (lambda d: (d / "a.py", "f = jax.pmap(g, 'i')\n", d / "a.py"),
     "is the input"),
])
def test_bad_input_exits_2_with_one_line_and_nothing_written(
    make, message, tmp_path, capsys):
  source, text, port = make(tmp_path)
  source.write_text(text)
  before = sorted(p.name for p in tmp_path.iterdir())
  code, out = _rewrite(source, "-o", port, capsys=capsys)
  assert code == 2
  assert message in out.err and len(out.err.strip().splitlines()) == 1
  assert sorted(p.name for p in tmp_path.iterdir()) == before
  if port != source:
    assert not port.exists()


def test_a_prove_spec_that_does_not_load_exits_2_before_writing(tmp_path,
                                                                capsys):
  port = tmp_path / "o.py"
  code, out = _rewrite(INPUTS / "flax_style_train.py", "-o", port,
                       "--prove", "nosuch.module:port", capsys=capsys)
  assert code == 2 and "--prove nosuch.module:port" in out.err
  assert not port.exists()


def test_a_tree_is_rewritten_whole_and_an_existing_one_refused(tmp_path,
                                                               capsys):
  tree = tmp_path / "src"
  (tree / "pkg").mkdir(parents=True)
  (tree / "pkg" / "train.py").write_text("import jax\n\n"
                                         "f = jax.pmap(g, 'i')\n")
  (tree / "util.py").write_text("X = 1  # no pmap: copied\n")
  out_tree = tmp_path / "port"
  code, out = _rewrite("--in-tree", tree, "--out-tree", out_tree,
                       capsys=capsys)
  assert code == 0, out
  assert "jax.shard_map(" in (out_tree / "pkg" / "train.py").read_text()
  assert (out_tree / "util.py").read_text() == "X = 1  # no pmap: copied\n"
  code, out = _rewrite("--in-tree", tree, "--out-tree", out_tree,
                       capsys=capsys)
  assert code == 2 and "exists" in out.err


def test_the_mesh_is_the_devices_pmap_maps_over(tmp_path):
  port = tmp_path / "t.py"
  rewrite.main([str(INPUTS / "tutorial_linear_regression.py"), "-o",
                str(port)])
  module = _load(port)
  mesh = module._pmap_mesh("num_devices")  # pylint: disable=protected-access
  assert list(mesh.devices.flat) == jax.local_devices()
  assert mesh is module._pmap_mesh("num_devices")  # built once  # pylint: disable=protected-access
  assert np.shape(mesh.devices) == (jax.local_device_count(),)


def _train_broadcast(module, steps=3):
  """examples/optax_tuple's loop: params and opt_state broadcast
  (`in_axes=None`), each batch stacked per device."""
  from examples.optax_tuple import train_pmap  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  params, opt_state = train_pmap.init()
  x, y = train_pmap.data(64 * steps)
  for i in range(steps):
    batch = {"x": x[i * 64:(i + 1) * 64].reshape(8, 8, -1),
             "y": y[i * 64:(i + 1) * 64].reshape(8, 8)}
    params, opt_state, _ = module.p_step(params, opt_state, batch)
  return jax.tree.leaves(jax.device_get((params, opt_state)))


def test_the_new_pmap_style_is_rewritten_and_trains_bitwise(tmp_path):
  # `in_axes=(None, None, 0), out_axes=(None, None, 0)`: the state P().
  from examples.optax_tuple import train_pmap  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  port = tmp_path / "optax_port.py"
  assert rewrite.main([str(ROOT / "examples/optax_tuple/train_pmap.py"),
                       "-o", str(port)]) == 0
  text = port.read_text()
  assert ("in_specs=((jax.P(), jax.P(), jax.P(\"batch\")), jax.P(\"batch\"))"
          in text)
  want = _train_broadcast(train_pmap)
  for got, expected in zip(_train_broadcast(_load(port)), want):
    np.testing.assert_array_equal(got, expected)
  # Negative control: check_vma=True sums each broadcast parameter's
  # gradient over the devices before the step's own pmean (the trap).
  trapped = tmp_path / "trapped.py"
  trapped.write_text(text.replace("check_vma=False", "check_vma=True"))
  assert any(not np.array_equal(a, b) for a, b in
             zip(_train_broadcast(_load(trapped)), want))
