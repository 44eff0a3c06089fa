"""A file with another library's pmap is never told it has none.

`compare.rewrite` takes `jax.pmap`, flax NNX's `nnx.pmap` and equinox's
`filter_pmap` (however the file imports them: each ported, and the port
computes pmap's result on 8 devices; the programs themselves:
tests/test_rewrite_nnx_equinox.py). Any other library's pmap is refused
with one line that names it and its line, exit 2, nothing written; a file
with no pmap at all is still "no jax.pmap found"; in a tree, an unknown
library's pmap stops the tree by name where a file with none is copied.
"""

import pathlib

import numpy as np
import pytest

from compare import rewrite

INPUTS = pathlib.Path(__file__).parent / "rewrite_inputs"


def _refusal(source, tmp_path, capsys):
  target = tmp_path / "out.py"
  code = rewrite.main([str(source), "-o", str(target)])
  err = capsys.readouterr().err.strip()
  assert code == 2 and not target.exists()
  assert len(err.splitlines()) == 1, err
  return err


# Each way of importing a library's pmap, the step it is ported to, and
# what that step must compute on 8 devices (x: [devices, 2], mapped).
_FORMS = [
    ("import flax.nnx as nx\n\n\n@nx.pmap(axis_name='i')\n"
     "def f(x):\n  return x * 2\n", "@nx.jit\n@nx.shard_map("),
    ("from equinox import filter_pmap as fp\n\n\n@fp\n"
     "def f(x):\n  return x * 2\n",
     "@equinox.filter_jit\n@functools.partial(filter_shard_map,"),
    ("import flax\n\n\ndef g(x):\n  return x * 2\n\n\n"
     "f = flax.nnx.pmap(g)\n", "f = flax.nnx.jit(flax.nnx.shard_map("),
]


@pytest.mark.parametrize("text,writes", _FORMS)
def test_each_way_of_importing_it_is_read_and_ported(text, writes,
                                                     tmp_path, capsys):
  source, target = tmp_path / "prog.py", tmp_path / "out.py"
  source.write_text(text)
  assert rewrite.main([str(source), "-o", str(target)]) == 0
  assert "1 pmap(s) rewritten" in capsys.readouterr().out
  ported = target.read_text()
  assert writes in ported and "pmap(" not in ported and "@fp" not in ported
  x = np.arange(16, dtype=np.float32).reshape(8, 2)
  names = {}
  exec(compile(ported, str(target), "exec"), names)  # pylint: disable=exec-used
  np.testing.assert_array_equal(np.asarray(names["f"](x)), x * 2)


def test_an_unknown_librarys_pmap_is_named_as_not_jax_pmap(tmp_path, capsys):
  source = tmp_path / "prog.py"
  source.write_text("import mylib\nstep = mylib.pmap(f)\n")
  err = _refusal(source, tmp_path, capsys)
  assert "mylib.pmap (line 2) is not jax.pmap" in err


def test_a_file_with_no_pmap_is_still_none_found(tmp_path, capsys):
  source = tmp_path / "prog.py"
  source.write_text("import jax\nfrom flax import nnx\nx = nnx.jit(f)\n")
  assert _refusal(source, tmp_path, capsys).endswith("no jax.pmap found")


def test_in_a_tree_a_librarys_pmap_is_ported_an_unknown_one_stops_it(
    tmp_path, capsys):
  tree = tmp_path / "src"
  tree.mkdir()
  (tree / "plain.py").write_text("x = 1\n")
  (tree / "model.py").write_text(
      (INPUTS / "nnx_pmap_train.py").read_text())
  out = tmp_path / "out"
  code = rewrite.main(["--in-tree", str(tree), "--out-tree", str(out)])
  assert code == 0, capsys.readouterr().err
  assert "@nnx.shard_map(" in (out / "model.py").read_text()
  assert (out / "plain.py").read_text() == "x = 1\n"  # copied as it is
  (tree / "step.py").write_text("import mylib\nf = mylib.pmap(g)\n")
  code = rewrite.main(["--in-tree", str(tree), "--out-tree",
                       str(tmp_path / "out2")])
  assert code == 2 and not (tmp_path / "out2").exists()
  assert "step.py: mylib.pmap (line 2) is not jax.pmap" in (
      capsys.readouterr().err)
