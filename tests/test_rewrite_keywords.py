"""`--global` on a step called with keyword arguments
(compare/_src/rewrite/write/global_keywords.py): flax nlp_seq's
`p_train_step(state, batch, dropout_rng=dropout_rngs)`.

The written program's numbers and its proof: tests/test_rewrite_global.py
(local_pmap_train) and tests/test_rewrite_global_handed.py (nlp_seq of
2021). Here: what is written, and what keeps the helpers, and why.
"""

import pytest

from compare._src.rewrite.write import global_keywords
from compare._src.rewrite import pipeline

PROGRAM = '''
import functools

import jax
import numpy as np


def train_step(params, batch, learning_rate, dropout_rng=None, scale=None):
  keep = jax.random.bernoulli(dropout_rng, 0.9, batch.shape)
  grads = jax.lax.pmean(jax.numpy.where(keep, batch, 0.0).mean(), "batch")
  return params - learning_rate * grads * scale, grads


def main():
  p_train_step = jax.pmap(functools.partial(train_step, learning_rate=0.1),
                          axis_name="batch")
  params = np.stack([np.float32(0)] * jax.local_device_count())
  keys = jax.random.split(jax.random.key(0), jax.local_device_count())
  scales = np.ones(jax.local_device_count(), np.float32)
  for _ in range(2):
    x = np.ones((jax.local_device_count(), 4), np.float32)
    params, loss = CALL
  print(params[0], loss[0])
'''


def _written(call):
  return pipeline.rewrite_global_source(PROGRAM.replace("CALL", call))


def test_keywords_are_passed_by_position_and_named_by_the_steps_lambda():
  written = _written("p_train_step(params, x, dropout_rng=keys, scale=scales)")
  code = written.code
  assert "_pmap_" not in code
  assert "params, loss = p_train_step(params, x, keys, scales)" in code
  assert ("lambda params, batch, dropout_rng, scale: functools.partial("
          in code), code
  assert "dropout_rng=jax.tree.map(lambda a: a[0], dropout_rng)" in code
  assert "scale=jax.tree.map(lambda a: a[0], scale)" in code
  # The two positional arguments and each keyword's (a value per device,
  # pmap's stack) all P(axis): one flat spec.
  assert 'in_specs=jax.P("batch")' in code, code
  assert any(f.kind == "changed" and "dropout_rng=, scale=" in f.text
             for f in written.findings)


def test_the_lambda_takes_the_keywords_in_the_first_calls_order():
  code = _written("p_train_step(params, x, scale=scales, dropout_rng=keys)"
                  ).code
  assert "p_train_step(params, x, scales, keys)" in code
  assert "lambda params, batch, scale, dropout_rng:" in code


@pytest.mark.parametrize("calls, says", [
    # Two calls naming other keywords: one lambda cannot take both.
    ("p_train_step(params, x, dropout_rng=keys, scale=scales)\n"
     "    jax.block_until_ready(p_train_step(params, x, dropout_rng=keys))",
     "other keyword arguments at different calls"),
])
def test_keywords_one_lambda_cannot_take_keep_the_helpers(calls, says):
  written = _written(calls)
  assert "_pmap_keywords" in written.code
  assert any(says in f.text for f in written.findings), [
      f.text for f in written.findings]


def test_a_function_not_defined_in_the_file_keeps_the_helpers():
  source = PROGRAM.replace("CALL", "p_train_step(params, x, dropout_rng=keys"
                           ", scale=scales)").replace(
                               "functools.partial(train_step,",
                               "functools.partial(np.add,")
  written = pipeline.rewrite_global_source(source)
  assert "_pmap_keywords" in written.code
  assert any("not defined in this file" in f.text
             for f in written.findings), [f.text for f in written.findings]


def test_by_position_keeps_the_positional_arguments_and_orders_the_rest():
  import libcst as cst  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  call = cst.parse_expression("f(a, b=1, c=2)")
  written = global_keywords.by_position(call, ("c", "b"))
  assert cst.Module([]).code_for_node(written) == "f(a, 2, 1)"
