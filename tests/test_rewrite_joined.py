"""`--global` on a file that joins `jax.distributed`: the mesh set after the
join, no helper of ours (compare/_src/rewrite/write/global_joined.py).

The programs themselves run in 2 processes x 4 emulated devices in
tests/test_rewrite_many_hosts.py (with a plant: the mesh over one process's
devices); here, where the mesh line goes for each way a program joins, the
forms that keep the first step's helpers and say why, and the proof of a
flax program that joins (BatchNorm, AdamW) with a plant it must fail.
"""

import pathlib

import pytest

from compare._src.prove import port as port_module
from compare._src.rewrite.write import global_joined
from compare._src.rewrite import pipeline
from compare._src.rewrite.proof import rewrite_proof

INPUTS = pathlib.Path(__file__).parent / "rewrite_inputs"
SET = "jax.set_mesh(jax.sharding.Mesh("

JOINS = {
    # joined only when the environment names a job: the mesh after the `if`
    "in an if of a function": ('''\
def join():
  if "C" in os.environ:
    jax.distributed.initialize()
  x = 1
''', 3, "  "),
    "in the else of an if": ('''\
def join():
  if "C" not in os.environ:
    pass
  else:
    jax.distributed.initialize()
  return 1
''', 5, "  "),
    "under the main guard": ('''\
if __name__ == "__main__":
  jax.distributed.initialize()
  main()
''', 2, "  "),
    "at module level": ('''\
jax.distributed.initialize()
x = 1
''', 1, ""),
}


@pytest.mark.parametrize("name", list(JOINS))
def test_the_mesh_follows_the_join_where_every_path_runs(name):
  source, line, indent = JOINS[name]
  code = "import jax, os\n" + source
  assert global_joined.where(code) == (line + 1, indent)
  written, _ = global_joined.set_mesh_after_join(code, '"batch"')
  lines = written.splitlines()
  at = next(i for i, text in enumerate(lines) if SET in text)
  assert lines[at].startswith(indent + SET)
  compile(written, name, "exec")  # the line sits in its block


@pytest.mark.parametrize("source, says", [
    ("for _ in range(2):\n  jax.distributed.initialize()\n", "for block"),
    ("jax.distributed.initialize()\njax.distributed.initialize()\n",
     "2 times"),
    ('def join():\n  if "C" not in os.environ:\n    return\n'
     "  jax.distributed.initialize()\n", "return before its join"),
])
def test_a_join_the_mesh_cannot_follow_on_every_path_says_why(source, says):
  assert says in global_joined.where("import jax, os\n" + source)


def test_such_a_file_keeps_the_helpers_and_the_report_says_why():
  source = (INPUTS / "multihost_tutorial.py").read_text().replace(
      '  if "COORDINATOR" in os.environ:\n',
      '  if "COORDINATOR" not in os.environ:\n    return\n  if True:\n')
  written = pipeline.rewrite_global_source(source)
  assert "_pmap_call" in written.code and SET not in written.code
  assert any("return before its join" in f.text for f in written.findings)


def test_the_written_file_names_no_mesh_and_sets_one_after_the_join():
  written = pipeline.rewrite_global_source(
      (INPUTS / "multihost_train.py").read_text())
  code = written.code
  assert "_pmap_" not in code and "block_until_ready" not in code
  assert code.count(SET) == 1 and "mesh=" not in code
  # Set inside join(), after the `if` that joins: both paths set it.
  join = code[code.index("def join():"):code.index("def main(")]
  assert SET in join.split("jax.distributed.initialize(")[1]
  assert "jax.device_put(create_train_state(jax.random.key(0)), jax.P())" \
      in code
  assert "jax.make_array_from_process_local_data(\n        jax.P(\"batch\")" \
      in code
  assert any("after the join" in f.text and f.kind == "changed"
             for f in written.findings)
  # The step and the mesh wrapped within 79 columns.
  step = code[code.index("p_train_step = "):code.index("def host_batches")]
  mesh = code[code.index(SET):code.index("def main(")]
  assert max(len(line) for line in (step + mesh).splitlines()) <= 79


def test_the_proof_passes_the_written_step_and_fails_a_wrong_spec(
    tmp_path, capsys):
  source = INPUTS / "multihost_train.py"
  target = tmp_path / "global.py"
  target.write_text(pipeline.rewrite_global_source(source.read_text()).code)
  team_port = port_module.load(
      "tests.rewrite_inputs.rewrite_ports:multihost_port")
  assert rewrite_proof.prove(team_port, source, target, steps=2,
                             global_step=True) == 0
  out = capsys.readouterr().out
  assert "port vs pmap             bitwise at every check" in out, out
  # The gradient trap: under jax's check the gradient of the P() state
  # arrives summed over the mesh, and the step's pmean leaves it 8 times
  # too large. (The batch taken whole, `P()`, would be no plant: a pmean'd
  # step computes the same numbers from it.)
  text = target.read_text()
  assert text.count(",\n    check_vma=False)") == 1
  target.write_text(text.replace(",\n    check_vma=False)", ")"))
  assert rewrite_proof.prove(team_port, source, target, steps=2,
                             global_step=True) == 1
  assert "verdict: fail, first at step 1" in capsys.readouterr().out
