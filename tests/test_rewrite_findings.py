"""Typed findings: the report and the rewrite read a finding's kind and
subject, never its words (issue 73).

Every message reworded as it is made (reversed, so no prefix or phrase
survives) must leave the written code and the report's counts as they
were, where before a finding's words decided both (`"global step" in
f.text` to retry without the uncalled functions; the counts by prefix).
"""

import dataclasses

from compare._src.rewrite import pipeline
from compare._src.rewrite import records
from compare._src.rewrite import report
from compare._src.rewrite.records import Kind
from compare._src.rewrite.records import Subject
from tests.test_rewrite_global_tidy import UNCALLED  # pylint: disable=g-bad-import-order
from tests.test_rewrite_global_tidy import INPUTS  # pylint: disable=g-bad-import-order

# A replicated value handed to an argument pmap broadcasts: refused while
# the global step is written (the writer's own blockers).
BROADCAST = '''import jax
import jax.numpy as jnp
from flax import jax_utils


def step(w, x):
  return jax.lax.pmean(w * x, "i")


p = jax.pmap(step, "i", in_axes=(None, 0))
w = jax_utils.replicate(jnp.ones(()))
x = jnp.ones((jax.local_device_count(), 2))
print(p(w, x))
'''


def _programs():
  flax_style = (INPUTS / "flax_style_train.py").read_text()
  at = flax_style.index("\n\nif __name__")
  return {
      "tutorial": (INPUTS / "tutorial_linear_regression.py").read_text(),
      "removed_puts": (INPUTS / "removed_puts.py").read_text(),
      "uncalled": ("import collections\n" + flax_style[:at] + UNCALLED
                   + flax_style[at:]),
      "broadcast": BROADCAST}


def _written(monkeypatch=None):
  """Each program's global code and its report's last lines (the counts),
  with every message reversed as it is made where `monkeypatch` is given."""
  if monkeypatch is not None:
    made = records.Finding.__post_init__

    def reworded(finding):
      made(finding)
      object.__setattr__(finding, "text", finding.text[::-1])
    monkeypatch.setattr(records.Finding, "__post_init__", reworded)
  out = {}
  for name, source in _programs().items():
    rewrite = pipeline.rewrite_global_source(source, f"{name}.py")
    lines = report.report_lines([(f"{name}.py", "out.py", rewrite)], True)
    out[name] = (rewrite.code, [line for line in lines
                                if not line.startswith(" ")][1:])
  return out


def test_rewording_every_message_changes_no_code_and_no_count(monkeypatch):
  before = _written()
  # The uncalled function set aside: the rest written, no place left.
  assert before["uncalled"][1][0].startswith(
      "1 pmap(s) rewritten to global arrays, 4 call site(s) moved to global "
      "arrays, 0 place(s) need a person"), before["uncalled"][1]
  assert "(1 file(s) the first step only" in before["broadcast"][1][0]
  assert "3 call(s) jax 0.10 removed rewritten" in before["removed_puts"][1][0]
  assert "2 dead local name(s) removed" in before["tutorial"][1][0]
  assert "cpu-wait" in before["tutorial"][1][1]
  assert _written(monkeypatch) == before


def test_a_refusal_while_writing_is_a_typed_place():
  rewrite = pipeline.rewrite_global_source(BROADCAST, "b.py")
  person = [f for f in rewrite.findings if f.kind == Kind.PERSON]
  assert [(f.line, f.subject) for f in person] == [(10, Subject.NOT_GLOBAL)]
  assert "_pmap_call(" in rewrite.code  # the first step is what is written


def test_a_kind_given_as_its_word_is_the_kind():
  finding = records.Finding(3, "person", "why")
  assert finding.kind is Kind.PERSON and finding.kind == "person"
  assert dataclasses.replace(finding, line=4).kind is Kind.PERSON
