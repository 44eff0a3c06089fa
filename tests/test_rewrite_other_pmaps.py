"""A file with another library's pmap is never told it has none.

`compare.rewrite` takes `jax.pmap`. A flax NNX program (`nnx.pmap`) or an
equinox one (`eqx.filter_pmap`), each as its library's docs write it and
each running on 8 devices as written, is refused with one line that names
the pmap, its line and how to port it, exit 2, nothing written; a file
with no pmap at all is still "no jax.pmap found"; in a tree, a file of
another library's pmap stops the tree by name where a file with none is
copied.
"""

import pathlib

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


@pytest.mark.parametrize("name,what,line,becomes", [
    ("nnx_pmap_train.py", "flax NNX's nnx.pmap (nnx.pmap, line 22)", 22,
     "nnx.shard_map under nnx.jit (docs/MORE-IDIOMS.md#nnx"),
    ("equinox_pmap_train.py",
     "equinox's filter_pmap (eqx.filter_pmap, line 14)", 14,
     "eqx.filter_jit over jax.shard_map (docs/MORE-IDIOMS.md#equinox-step"),
])
def test_another_librarys_pmap_is_named_with_what_to_do(
    name, what, line, becomes, tmp_path, capsys):
  err = _refusal(INPUTS / name, tmp_path, capsys)
  assert "no jax.pmap found" not in err
  assert f"it calls {what}" in err and becomes in err
  assert "prove it with compare.prove" in err
  source_line = (INPUTS / name).read_text().splitlines()[line - 1]
  assert "pmap(" in source_line  # the line named is the pmap's


@pytest.mark.parametrize("text,named", [
    ("import flax.nnx as nx\nstep = nx.pmap(f, axis_name='i')\n",
     "flax NNX's nnx.pmap (nx.pmap, line 2)"),
    ("from equinox import filter_pmap as fp\n\n\n@fp\ndef f(x):\n  return x\n",
     "equinox's filter_pmap (fp, line 4)"),
    ("import flax\nstep = flax.nnx.pmap(f)\n",
     "flax NNX's nnx.pmap (flax.nnx.pmap, line 2)"),
])
def test_each_way_of_importing_it_is_read(text, named, tmp_path, capsys):
  source = tmp_path / "prog.py"
  source.write_text(text)
  assert f"it calls {named}" in _refusal(source, tmp_path, capsys)


def test_an_unknown_librarys_pmap_is_named_as_not_jax_pmap(tmp_path, capsys):
  source = tmp_path / "prog.py"
  source.write_text("import mylib\nstep = mylib.pmap(f)\n")
  err = _refusal(source, tmp_path, capsys)
  assert "mylib.pmap (line 2) is not jax.pmap" in err


def test_a_file_with_no_pmap_is_still_none_found(tmp_path, capsys):
  source = tmp_path / "prog.py"
  source.write_text("import jax\nfrom flax import nnx\nx = nnx.jit(f)\n")
  assert _refusal(source, tmp_path, capsys).endswith("no jax.pmap found")


def test_in_a_tree_another_librarys_pmap_stops_it_by_name(tmp_path, capsys):
  tree = tmp_path / "src"
  tree.mkdir()
  (tree / "plain.py").write_text("x = 1\n")
  (tree / "model.py").write_text(
      (INPUTS / "nnx_pmap_train.py").read_text())
  out = tmp_path / "out"
  code = rewrite.main(["--in-tree", str(tree), "--out-tree", str(out)])
  err = capsys.readouterr().err
  assert code == 2 and not out.exists()
  assert "model.py: it calls flax NNX's nnx.pmap" in err
  (tree / "model.py").unlink()
  (tree / "step.py").write_text("import jax\nf = jax.pmap(g, 'i')\n")
  code = rewrite.main(["--in-tree", str(tree), "--out-tree", str(out)])
  assert code == 0, capsys.readouterr().err
  assert (out / "plain.py").read_text() == "x = 1\n"  # copied as it is
