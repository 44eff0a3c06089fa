"""`--global` on pmap programs written elsewhere: the pmap docs' forms and
JAX's own SPMD MNIST example.

`jax.pmap(lambda w, x: w * x ** 2)`: a pmap that names no axis (it runs no
collective), whose lambda's parameter has the name of a replicated value
of the code around it. The first step writes such a pmap over "devices";
the second takes that as the mesh's one axis. A lambda's parameters and a
comprehension's targets are its own names: reading them is not reading
the replicated value outside (before, both were refused: "the pmaps name
0 axes" and "w is placed once on the mesh now").

JAX's examples/spmd_mnist_classifier_fromscratch.py (its last pmap
version) replicates with `tree_map(replicate_array, ...)`, `replicate_array`
a lambda of `np.broadcast_to`, reads the params back with `tree_map(lambda
x: x[0], ...)`, and stacks its batches in a generator: the params go to
P(), the step's one output too, the batches stay stacked and the report
says so (before, it was refused for a name bound twice in `predict`, which
no step reads).
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import libcst

from compare import rewrite
from compare._src.rewrite.read import global_idioms
from compare._src.rewrite import pipeline
from compare._src.rewrite import rewrite_helpers
from tests.test_rewrite import _script_output
from tests.test_rewrite_global import assert_idiomatic  # pylint: disable=g-bad-import-order
from tests.test_rewrite_global import STACKED  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
# jax's examples/datasets.py stand-in, beside the copied MNIST example
# (bench/runners/rewrite_global_runs.py reads it too).
MNIST = (INPUTS / "mnist_datasets.py").read_text()

NO_AXIS = '''"""The pmap docs' first example, with a replicated weight."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import jax_utils

n = jax.local_device_count()
w = jax_utils.replicate(jnp.float32(2.0))
square = jax.pmap(lambda w, x: w * x ** 2)
x = np.arange(2.0 * n, dtype=np.float32).reshape(n, 2)
for step in range(3):
  x = square(w, x) / 100.0
print([float(v) for v in np.asarray(x).ravel()])
print(float(jax_utils.unreplicate(w)))
'''


def test_a_pmap_naming_no_axis_and_a_lambda_parameter_take_the_step(
    tmp_path, capsys):
  source, port = tmp_path / "square.py", tmp_path / "square_global.py"
  source.write_text(NO_AXIS)
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  out = capsys.readouterr().out
  assert code == 0, out
  assert "0 place(s) need a person" in out
  program = rewrite_helpers.without_helpers(port.read_text())
  assert 'jax.NamedSharding(_pmap_mesh("devices"), jax.P())' in program
  assert "in_specs=((jax.P(), jax.P(\"devices\")), jax.P(\"devices\"))" in (
      program)
  assert not STACKED.findall(program), STACKED.findall(program)
  printed = _script_output(port)
  assert printed == _script_output(source)
  assert len(printed.splitlines()) == 2


def test_a_comprehension_target_is_its_own_name():
  source = NO_AXIS.replace(
      "print(float(jax_utils.unreplicate(w)))",
      "print([w * 2 for w in range(3)], float(jax_utils.unreplicate(w)))")
  both = pipeline.rewrite_global_source(source)
  assert not [f for f in both.findings if f.kind == "person"], both.findings
  assert "jax.P())" in both.code and "jax_utils.replicate(" not in both.code


def test_a_read_of_the_replicated_value_itself_is_still_refused():
  # The negative control: `w` outside the lambda, read per device.
  source = NO_AXIS.replace("print(float(jax_utils.unreplicate(w)))",
                           "print(w.shape)")
  both = pipeline.rewrite_global_source(source)
  person = [f.text for f in both.findings if f.kind == "person"]
  assert any("w is placed once on the mesh now" in t for t in person), person


def test_a_named_and_an_unnamed_pmap_take_a_mesh_each(tmp_path, capsys):
  # Two axes, neither pmap inside the other: each its own 1-D mesh of the
  # same devices (a pmap inside a pmap is a 2-D mesh, left to a person).
  source, port = tmp_path / "two.py", tmp_path / "two_global.py"
  source.write_text(NO_AXIS.replace(
      "for step in range(3):",
      "mean = jax.pmap(lambda v: jax.lax.pmean(v, 'batch'), 'batch')\n"
      "for step in range(3):").replace(
          "print(float(jax_utils.unreplicate(w)))",
          "print(float(jax_utils.unreplicate(mean(w))))"))
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  out = capsys.readouterr().out
  assert code == 0, out
  assert re.search(r"changed: the pmaps name 2 axes \(\['batch', 'devices'\]; "
                   r"'devices' is a pmap.s that names none\), none inside "
                   "another", out), out
  assert "mesh=_pmap_mesh('batch')" in port.read_text()
  assert _script_output(port) == _script_output(source)


def _accuracies(script, cwd):
  """The accuracies the example prints (its epoch times left out)."""
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
         "JAX_PLATFORMS": "cpu"}
  env.pop("PYTHONPATH", None)
  done = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=300,
                        check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  return [l for l in done.stdout.splitlines() if "accuracy" in l]


def test_jax_spmd_mnist_goes_global_but_its_batches(tmp_path, capsys):
  (tmp_path / "examples").mkdir()
  (tmp_path / "examples" / "__init__.py").write_text("")
  (tmp_path / "examples" / "datasets.py").write_text(MNIST)
  source = tmp_path / "spmd_mnist.py"
  shutil.copy(INPUTS / "jax_spmd_mnist.py", source)
  port = tmp_path / "spmd_mnist_port.py"
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  out = capsys.readouterr().out
  assert code == 0, out
  # The params: `tree_map(replicate_array, ...)` placed with P(), the
  # step's one output fed back and read with `tree_map(lambda x: x[0], ...)`
  # declared P(); the batches, stacked in a generator, stay stacked.
  assert re.search(r"spmd_mnist\.py:104: kept: spmd_update's argument\(s\) "
                   r"1 keep pmap's stacked layout", out), out
  assert "in_specs (jax.P(), jax.P('batch')), out_specs jax.P()," in out
  assert ("1 pmap(s) rewritten to global arrays, 2 call site(s) moved to "
          "global arrays, 0 place(s) need a person, 1 call site(s) keep "
          "pmap's stacked layout") in out
  # pmap's view of the stacked batch: one line in the step's own body.
  assert ("    batch = jax.tree.map(lambda a: a[0], batch)  # pmap's "
          "per-device view\n") in port.read_text()
  assert_idiomatic(source, port)
  assert "--global;" not in out  # no pointer to the step it asked for
  program = rewrite_helpers.without_helpers(port.read_text())
  assert "tree_map(replicate_array" not in program
  assert not STACKED.findall(program), STACKED.findall(program)
  printed = _accuracies(port, tmp_path)
  assert len(printed) == 20  # train and test, 10 epochs
  assert printed == _accuracies(source, tmp_path)


def test_a_replicator_rebound_is_no_longer_one():
  source = (INPUTS / "jax_spmd_mnist.py").read_text().replace(
      "  replicated_params = tree_map(replicate_array, init_params)",
      "  replicate_array = lambda x: x\n"
      "  replicated_params = tree_map(replicate_array, init_params)")
  both = pipeline.rewrite_global_source(source)
  assert "jax.P())" not in rewrite_helpers.without_helpers(both.code)


ONE_OUTPUT = """
import jax
from flax import jax_utils
from flax.training import common_utils

def run(params, batches, log):
  step = jax.pmap(lambda p, b: jax.lax.pmean(p * b.mean(), "i"), "i")
  params = jax_utils.replicate(params)
  for batch in batches:
    params = step(params, common_utils.shard(batch))
    {read}
  return jax_utils.unreplicate(params)
"""


def test_one_output_is_p_only_where_every_read_takes_one_copy():
  read_once = pipeline.rewrite_global_source(
      ONE_OUTPUT.format(read="print(jax_utils.unreplicate(params))"))
  assert re.search(r"out_specs=jax\.P\(\)[,)]", read_once.code), (
      read_once.findings)
  per_device = pipeline.rewrite_global_source(
      ONE_OUTPUT.format(read="log.append(params)"))
  person = [f.text for f in per_device.findings if f.kind == "person"]
  assert person, per_device.code  # read per device: refused, not P()
  assert not re.search(r"out_specs=jax\.P\(\)[,)]", per_device.code)
  # `params[0]`: device 0's copy of an array, a tuple's element: not one
  # copy as the output is declared (refused where it meets the replicated
  # params), whichever it is.
  indexed = pipeline.rewrite_global_source(
      ONE_OUTPUT.format(read="print(params[0])"))
  assert any(f.kind == "person" for f in indexed.findings), indexed.code
  assert not re.search(r"out_specs=jax\.P\(\)[,)]", indexed.code)


# transformers' flax examples (run_clm_flax.py and its siblings): the state's
# own `replicate` method copies the state and splits its dropout key.
HF_STATE = '''
import jax
import jax.numpy as jnp
from flax import jax_utils
from flax.training import train_state
from flax.training.common_utils import shard, shard_prng_key


class TrainState(train_state.TrainState):
  dropout_rng: jnp.ndarray

  def replicate(self):
    return jax_utils.replicate(self).replace(
        dropout_rng=shard_prng_key(self.dropout_rng))


def train(state, loader, steps):
  p_train_step = jax.pmap(lambda s, b: (s, jax.lax.pmean(b, "batch")),
                          "batch", donate_argnums=(0,))
  state = state.replicate()
  for _ in range(steps):
    batch = shard(next(loader))
    state, metrics = p_train_step(state, batch)
  return state
'''


def test_a_replicate_method_of_the_programs_own_is_left_to_a_person():
  # Placing it with P() would give every device one dropout key.
  first = rewrite.rewrite_source(HF_STATE)
  kept = [f.text for f in first.findings if f.line == 20]
  assert kept and "a replicate of the program's own" in kept[0], kept
  assert "place it once" not in kept[0]
  both = pipeline.rewrite_global_source(HF_STATE)
  person = [(f.line, f.text) for f in both.findings if f.kind == "person"]
  assert any(line == 20 and "state.replicate(...): a replicate of the "
             "program's own" in text for line, text in person), person
  assert "jax.device_put(" not in both.code


def test_a_broadcast_to_a_written_count_is_no_replicate():
  # flax wmt's per-host psum: a stack for a pmap over one device a host.
  def replicates(code):
    return global_idioms.is_replicate_call(libcst.parse_expression(code))
  assert replicates(
      "tree_map(lambda x: np.broadcast_to(x, (n,) + x.shape), t)")
  assert replicates("jax.tree.map(lambda x: jnp.broadcast_to(x, "
                    "(jax.local_device_count(),) + x.shape), t)")
  assert not replicates(
      "jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (1,) + "
      "x.shape), xs)")
  assert not replicates("tree_map(lambda x: np.broadcast_to(x, (n, 2)), t)")
