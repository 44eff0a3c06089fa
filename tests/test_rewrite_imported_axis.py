"""`--global` on the pmap arguments teams write: an axis name kept in
another module, and `devices=`.

Teams keep their axis names in a module of constants (`from mypkg import
axes` ... `axis_name=axes.BATCH`, or `from mypkg.axes import BATCH`). The
rewrite reads the constant from that module's source beside the program
(`compare._src.rewrite.read.pmap_arguments`), imports nothing, and takes the second
step; where the name cannot be read as one string it refuses by line.
A pmap over `devices=jax.local_devices()` maps over the devices the global
step's mesh holds anyway; any other device list is refused.
"""

import pathlib

import pytest

from compare import rewrite
from compare._src.rewrite import rewrite_helpers
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order
from tests.test_rewrite_global import STACKED  # pylint: disable=g-bad-import-order

INPUTS = pathlib.Path(__file__).resolve().parent / "rewrite_inputs"
AXES_MODULE = '"""The job\'s mesh axes."""\n\nBATCH = "batch"\nMODEL = "model"\n'
# How the program names the module, and how it names the axis.
FORMS = {
    "module": ("from teampkg import axes", "axes.BATCH"),
    "module as": ("from teampkg import axes as ax", "ax.BATCH"),
    "import as": ("import teampkg.axes as axes", "axes.BATCH"),
    "name": ("from teampkg.axes import BATCH", "BATCH"),
    "name as": ("from teampkg.axes import BATCH as DATA", "DATA"),
}


def _program(tmp_path, import_line, axis, module=AXES_MODULE):
  package = tmp_path / "teampkg"
  package.mkdir(exist_ok=True)
  (package / "__init__.py").write_text("")
  (package / "axes.py").write_text(module)
  text = (INPUTS / "flax_style_train.py").read_text()
  text = text.replace('axis_name="batch"', f"axis_name={axis}").replace(
      "\nimport optax\n", f"\nimport optax\n\n{import_line}\n", 1)
  assert text.count(f"axis_name={axis}") == 3
  source = tmp_path / "train.py"
  source.write_text(text)
  return source


@pytest.mark.parametrize("form", list(FORMS))
def test_an_imported_axis_constant_takes_the_second_step(form, tmp_path,
                                                         capsys):
  source = _program(tmp_path, *FORMS[form])
  port = tmp_path / "train_global.py"
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  out = capsys.readouterr().out
  assert code == 0, out
  assert "0 place(s) need a person" in out
  program = rewrite_helpers.without_helpers(port.read_text())
  assert not STACKED.findall(program), STACKED.findall(program)
  # The global batch placed on the axis the constant names, on the
  # module's mesh over that axis.
  assert 'jax.NamedSharding(mesh, jax.P("batch"))' in program
  assert "jax.sharding.Mesh(" in program and '("batch",))' in program
  if form == "module":  # the numbers agree (one run: the rest differ only in
    # how the constant is read, which the program text above pins)
    assert _script_output(port) == _script_output(source)


@pytest.mark.parametrize("case, import_line, axis, module", [
    ("no such constant", "from teampkg import axes", "axes.DATA",
     AXES_MODULE),
    ("not a string", "from teampkg import axes", "axes.BATCH",
     "BATCH = ('batch',)\n"),
    ("no such module", "from otherpkg import axes", "axes.BATCH",
     AXES_MODULE),
    ("bound twice", "from teampkg import axes\naxes = None", "axes.BATCH",
     AXES_MODULE),
    ("a plain import", "import teampkg.axes", "teampkg.axes.BATCH",
     AXES_MODULE),
])
def test_an_axis_it_cannot_read_is_refused_by_line(case, import_line, axis,
                                                   module, tmp_path, capsys):
  del case
  source = _program(tmp_path, import_line, axis, module)
  port = tmp_path / "train_global.py"
  assert rewrite.main([str(source), "-o", str(port), "--global"]) == 1
  out = capsys.readouterr().out
  assert "axis_name is an expression" in out
  assert f"{source}:" in out


@pytest.mark.parametrize("devices, taken", [
    ("jax.local_devices()", True),  # the mesh the global step builds anyway
    ("jax.local_devices()[:4]", False),
    ("jax.devices()", False)])
def test_a_pmap_over_this_processs_devices_takes_the_second_step(
    devices, taken, tmp_path, capsys):
  text = (INPUTS / "flax_style_train.py").read_text()
  pmap = 'jax.pmap(train_step, axis_name="batch"'
  assert text.count(pmap) == 1
  source = tmp_path / "train.py"
  source.write_text(text.replace(pmap, f"{pmap}, devices={devices}"))
  port = tmp_path / "train_global.py"
  code = rewrite.main([str(source), "-o", str(port), "--global"])
  out = capsys.readouterr().out
  if not taken:
    assert code == 1 and "pmap over given devices" in out, out
    return
  assert code == 0 and "0 place(s) need a person" in out, out
  program = rewrite_helpers.without_helpers(port.read_text())
  assert not STACKED.findall(program), STACKED.findall(program)
  assert _script_output(port) == _script_output(source)
