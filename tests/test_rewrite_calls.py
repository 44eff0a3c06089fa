"""`python -m compare.rewrite` tells the truth about what it did.

Every way a pmapped function is called runs after the rewrite and prints
the original's numbers (tests/rewrite_inputs/call_forms.py); the report's
"changed" lines are the pmaps rewritten, one each; no finding twice; a
nested pmap is left whole; `donate_argnums` reported kept is kept.
"""

import collections
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from compare import rewrite
from tests.test_rewrite import _load, _script_output  # pylint: disable=g-bad-import-order

ROOT = pathlib.Path(__file__).resolve().parents[1]
INPUTS = ROOT / "tests" / "rewrite_inputs"


def test_every_call_form_runs_and_prints_the_same(tmp_path, capsys):
  port = tmp_path / "call_forms_port.py"
  assert rewrite.main([str(INPUTS / "call_forms.py"), "-o",
                       str(port)]) == 0
  out = capsys.readouterr().out
  assert "5 pmap(s) rewritten, 0 place(s) need a person" in out
  want = _script_output(INPUTS / "call_forms.py")
  assert want.count("\n") == 9  # every form printed its number
  assert _script_output(port) == want


def test_donate_argnums_reported_kept_is_kept(tmp_path):
  port = tmp_path / "call_forms_port.py"
  result = rewrite.rewrite_source((INPUTS / "call_forms.py").read_text())
  kept = [f for f in result.findings if "donate_argnums kept" in f.text]
  assert [f.line for f in kept] == [45]
  assert result.code.count("donate_argnums=(0,)") == 1
  port.write_text(result.code)
  module = _load(port)
  n = jax.local_device_count()
  params = jnp.zeros((n, 4))
  batch = {"x": jnp.ones((n, 8, 4)), "y": jnp.ones((n, 8))}
  rngs = jax.random.split(jax.random.PRNGKey(0), n)
  # The first call's output lies on the mesh as the step wants it.
  params, _ = module.p_train_step(params, batch, dropout_rng=rngs)
  module.p_train_step(params, batch, dropout_rng=rngs)
  assert params.is_deleted()  # the state's buffers were donated
  assert not batch["x"].is_deleted()


def test_each_call_is_waited_for_on_cpu(tmp_path, monkeypatch):
  # Steps queued unread can abort emulated CPU devices' rendezvous
  # (docs/jax-facts.md): the port waits for every call, not just the first.
  port = tmp_path / "call_forms_port.py"
  port.write_text(rewrite.rewrite_source(
      (INPUTS / "call_forms.py").read_text()).code)
  module = _load(port)
  waited = []
  real = jax.block_until_ready
  monkeypatch.setattr(jax, "block_until_ready",
                      lambda x: waited.append(1) or real(x))
  n = jax.local_device_count()
  params = jnp.zeros((n, 4))
  batch = {"x": jnp.ones((n, 8, 4)), "y": jnp.ones((n, 8))}
  rngs = jax.random.split(jax.random.PRNGKey(0), n)
  for _ in range(3):
    params, _ = module.p_train_step(params, batch, dropout_rng=rngs)
  assert len(waited) == 3


# Sources the report is checked on: each pmap either "changed" (and
# rewritten) or left to a person, never both.
SOURCES = {
    "keywords": "f = jax.pmap(g, 'i', donate_argnums=(0,))\n"
                "y = f(x, rng=k)\n",
    "dynamic static": "f = jax.pmap(g, 'i', static_broadcasted_argnums=S)\n",
    "decorated dynamic static": (
        "@functools.partial(jax.pmap, axis_name='i',\n"
        "                   static_broadcasted_argnums=S)\n"
        "def f(x):\n  return jax.lax.psum(x, 'i')\n"),
    "in_axes 1": "f = jax.pmap(g, 'i', in_axes=1)\n"
                 "def h(x):\n  return jax.lax.psum(x, 'i')\n",
    "out_axes 1": "f = jax.pmap(g, 'i', out_axes=1)\n"
                  "def h(x):\n  return jax.lax.psum(x, 'i')\n",
    "axis_size": "f = jax.pmap(g, 'i', axis_size=4)\n"
                 "def h(x):\n  return jax.lax.psum(x, 'i')\n",
    "nested": "f = jax.pmap(jax.pmap(g, 'j'), 'i')\n"
              "def h(x):\n  return jax.lax.psum(jax.lax.psum(x, 'j'), 'i')\n",
    "nested partial": (
        "f = functools.partial(jax.pmap, axis_name='i')(jax.pmap(g, 'j'))\n"),
    "mixed": "f = jax.pmap(g, 'i')\nh = jax.pmap(g, 'i', in_axes=A)\n",
    "unknown axis": "f = jax.pmap(g, 'i')\n"
                    "def h(x):\n  return jax.lax.psum(x, 'j')\n",
    "two decorators": "@jax.pmap\n@jax.pmap\ndef f(x):\n  return x\n",
}


def _rewritten_pmaps(code: str) -> int:
  return code.count("_pmap_view(") - code.count("def _pmap_view(")


@pytest.mark.parametrize("case", [*SOURCES, "call_forms", "tutorial",
                                  "flax_style"])
def test_changed_lines_are_the_pmaps_rewritten_and_none_twice(case):
  files = {"call_forms": "call_forms.py",
           "tutorial": "tutorial_linear_regression.py",
           "flax_style": "flax_style_train.py"}
  source = ((INPUTS / files[case]).read_text() if case in files else
            "import functools\nimport jax\n\n" + SOURCES[case])
  result = rewrite.rewrite_source(source)
  kinds = collections.defaultdict(set)
  for finding in result.findings:
    kinds[finding.line].add(finding.kind)
  assert not [line for line, k in kinds.items() if {"changed", "person"} <= k]
  changed = [f for f in result.findings if f.kind == "changed"]
  assert len(changed) == _rewritten_pmaps(result.code)
  texts = [(f.line, f.text) for f in result.findings]
  assert len(texts) == len(set(texts)), texts
  if result.needs_a_person and not changed:
    assert result.code == source  # nothing half-rewritten


@pytest.mark.parametrize("case", ["in_axes 1", "out_axes 1", "axis_size"])
def test_a_pmap_left_to_a_person_still_names_its_axis(case):
  result = rewrite.rewrite_source("import jax\n\n" + SOURCES[case])
  assert not [f for f in result.findings if "no pmap of this file" in f.text]
  assert len([f for f in result.findings if f.kind == "person"]) == 1


@pytest.mark.parametrize("case", ["nested", "nested partial"])
def test_a_nested_pmap_is_left_whole(case):
  source = "import functools\nimport jax\n\n" + SOURCES[case]
  result = rewrite.rewrite_source(source)
  assert result.code == source
  assert [f.kind for f in result.findings] == ["person"]
  assert "a pmap inside a pmap" in result.findings[0].text
