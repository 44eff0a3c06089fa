"""`--global` where a pmapped step is handed to the program's own function.

flax's `examples/wmt` (google/flax at 18f8f311) builds `p_eval_step` in
`train_and_evaluate` and calls `evaluate(p_eval_step=p_eval_step,
params=state.params, ...)`, whose body shards each eval batch and calls
`p_eval_step(params, eval_batch)`; before Orbax saves the state it maps
`ocp.utils.fully_replicated_host_local_array_to_global_array` over it.
`HANDED` is a program of those shapes, written as that file is; it must
take the second step with no place left and print the original's numbers.
Where the step's calls are not all in view, the place is named by line.
"""

import pytest

from compare._src.rewrite import rewrite_helpers
from tests.test_rewrite import _script_output  # pylint: disable=g-bad-import-order
from tests.test_rewrite_global_functions import _rewritten as rewritten
from tests.test_rewrite_global_places import assert_places

HANDED = '''
import functools

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import jax_utils
from flax.training import common_utils
from jax import lax


def train_step(params, batch, learning_rate, dropout_rng=None):
  keep = jax.random.bernoulli(dropout_rng, 0.9, batch["x"].shape)

  def loss_fn(w):
    x = jnp.where(keep, batch["x"], 0.0) / 0.9
    return jnp.mean((x @ w["kernel"] - batch["y"]) ** 2)

  loss, grads = jax.value_and_grad(loss_fn)(params)
  grads = lax.pmean(grads, "batch")
  new_params = jax.tree_util.tree_map(lambda p, g: p - learning_rate * g,
                                      params, grads)
  metrics = {"loss": lax.psum(loss * batch["x"].shape[0], "batch"),
             "denominator": lax.psum(batch["x"].shape[0], "batch")}
  return new_params, metrics


def eval_step(params, batch):
  error = (batch["x"] @ params["kernel"] - batch["y"]) ** 2
  return lax.psum({"loss": error.sum(), "denominator": error.size}, "batch")


def evaluate(*, p_eval_step, params, eval_batches):
  """Evaluate the params and return a dictionary with the metrics."""
  eval_metrics = []
  for eval_batch in eval_batches:
    eval_batch = common_utils.shard(eval_batch)
    metrics = p_eval_step(params, eval_batch)
    eval_metrics.append(metrics)
  eval_metrics = common_utils.get_metrics(eval_metrics)
  sums = jax.tree_util.tree_map(jnp.sum, eval_metrics)
  denominator = sums.pop("denominator")
  return jax.tree_util.tree_map(lambda x: x / denominator, sums)


def make_batches(rng, n):
  out = []
  for _ in range(n):
    x = rng.normal(size=(32, 3)).astype(np.float32)
    out.append({"x": x, "y": x @ np.float32([1, -2, 3])})
  return out


def main():
  rng = np.random.default_rng(0)
  train_batches, eval_batches = make_batches(rng, 4), make_batches(rng, 2)
  params = {"kernel": np.zeros(3, np.float32)}
  params = jax_utils.replicate(params)
  p_train_step = jax.pmap(
      functools.partial(train_step, learning_rate=0.1),
      axis_name="batch",
      donate_argnums=(0,),
  )
  p_eval_step = jax.pmap(eval_step, axis_name="batch")
  dropout_rngs = jax.random.split(jax.random.PRNGKey(0),
                                  jax.local_device_count())
  train_metrics = []
  for step in range(4):
    batch = common_utils.shard(train_batches[step])
    params, metrics = p_train_step(params, batch, dropout_rng=dropout_rngs)
    train_metrics.append(metrics)
    if step % 2 == 1:
      summary = common_utils.get_metrics(train_metrics)
      print("train", float(summary["loss"].sum() / summary["denominator"].sum()))
      train_metrics = []
      results = evaluate(p_eval_step=p_eval_step, params=params,
                         eval_batches=eval_batches)
      print("eval", {k: float(v) for k, v in results.items()})
      saved = jax.tree_util.tree_map(
          ocp.utils.fully_replicated_host_local_array_to_global_array, params)
      print("saved", np.asarray(saved["kernel"]).tolist())
  print("last", last_loss(p_eval_step, params, eval_batches[0]))


def last_loss(p_eval_step, params, batch):
  sums = jax_utils.unreplicate(p_eval_step(params, common_utils.shard(batch)))
  return float(sums["loss"] / sums["denominator"])


main()
'''


def _rewritten(tmp_path, capsys, text):
  return rewritten(tmp_path, capsys, text, "wmtlike")


def test_a_step_handed_to_the_programs_function_is_followed(tmp_path, capsys):
  code, source, port, out = _rewritten(tmp_path, capsys, HANDED)
  assert code == 0, out
  assert "2 pmap(s) rewritten to global arrays" in out, out
  assert "0 place(s) need a person" in out, out
  text = rewrite_helpers.without_helpers(port.read_text())
  for gone in ("jax_utils.replicate(", "common_utils.shard(", "jax.pmap("):
    assert gone not in text, gone
  # The params in P() at every call, the handed step's included; its
  # metrics, gathered per device, keep pmap's stacked layout.
  assert "_pmap_" not in text  # the keyword call passed by position
  assert "in_specs=(jax.P(), jax.P(\"batch\"), jax.P(\"batch\"))" in text
  assert "in_specs=(jax.P(), jax.P(\"batch\"))" in text, text
  assert "out_specs=(jax.P(), jax.P(\"batch\"))" in text, text
  assert "fully_replicated_host_local_array_to_global_array, params)" in text
  printed = _script_output(source)
  assert printed.count("eval") == 2 and "last" in printed, printed
  assert _script_output(port) == printed


# Each: (what replaces what in HANDED, the place's words).
BLOCKED = {
    # The reading goes by name: under another name the calls are another's.
    "another name": (
        [("def evaluate(*, p_eval_step,", "def evaluate(*, eval_fn,"),
         ("metrics = p_eval_step(params, eval_batch)",
          "metrics = eval_fn(params, eval_batch)"),
         ("evaluate(p_eval_step=p_eval_step,", "evaluate(eval_fn=p_eval_step,")],
        "p_eval_step, a pmapped step, given to evaluate's parameter "
        "eval_fn, another name"),
    # A second call gives the parameter another step.
    "a call giving another step": (
        [("  print(\"last\",", "  evaluate(p_eval_step=p_train_step, "
          "params=params, eval_batches=[])\n  print(\"last\",")],
        "gives its parameter p_eval_step something else"),
    # Another function binds a value of the step's name and gives it on.
    "a local of the step's name": (
        [("def make_batches(rng, n):",
          "def evaluate_other(batches):\n"
          "  p_eval_step = lambda p, b: {\"loss\": 0.0, \"denominator\": 1}\n"
          "  return evaluate(p_eval_step=p_eval_step, params=None,\n"
          "                  eval_batches=batches)\n\n\n"
          "def make_batches(rng, n):")],
        "gives it the p_eval_step its own function binds"),
    # Handed on again inside the function: its calls there are not seen.
    "handed on again": (
        [("    metrics = p_eval_step(params, eval_batch)",
          "    metrics = functools.partial(p_eval_step)(params, eval_batch)")],
        "which hands it on or reads it at line"),
    # Called inside a function of the function's own.
    "called in a nested function": (
        [("    metrics = p_eval_step(params, eval_batch)",
          "    run = lambda b: 0\n\n    def run(b):\n"
          "      return p_eval_step(params, b)\n    metrics = run(eval_batch)")],
        "inside a function of its own"),
    # A decorator may call it otherwise.
    "a decorated function": (
        [("def evaluate(*,", "@functools.lru_cache\ndef evaluate(*,")],
        "which the reading does not follow"),
    # Given to a function that is not the program's own.
    "given to a library": (
        [("  print(\"last\",", "  print(p_eval_step)\n  print(\"last\",")],
        "p_eval_step, a pmapped step, given to print, not a function of "
        "this file"),
    # Kept in a container: given to no function at all.
    "kept in a list": (
        [("  print(\"last\",", "  steps = [p_eval_step]\n  print(\"last\",")],
        "p_eval_step, a pmapped step, used as a value"),
    # A parameter named as a step, defined after it, given something else:
    # its calls are no step's (the reading by name took them as the step's).
    "a parameter named as a step, given another function": (
        [("  print(\"last\", last_loss(p_eval_step,",
          "  print(\"last\", last_loss(lambda p, b: b,")],
        "p_eval_step is a parameter of last_loss, named as a pmapped step"),
}


@pytest.mark.parametrize("case", sorted(BLOCKED))
def test_a_step_whose_calls_are_not_all_in_view_is_reported(case, tmp_path,
                                                           capsys):
  changes, why = BLOCKED[case]
  text = HANDED
  for old, new in changes:
    assert old in text, old
    text = text.replace(old, new)
  code, _, port, out = _rewritten(tmp_path, capsys, text)
  assert code == 1, out
  assert_places(out, "wmtlike", why)
  assert "jax.device_put(" not in port.read_text()


def test_orbax_conversion_keeps_only_a_replicated_value(tmp_path, capsys):
  # Of a replicated value it is that value; of a batch, pmap's stack is
  # what it read (and a global batch is no such value): a place.
  text = HANDED.replace(
      "          ocp.utils.fully_replicated_host_local_array_to_global_array, "
      "params)",
      "          ocp.utils.fully_replicated_host_local_array_to_global_array, "
      "batch)")
  assert text != HANDED
  code, _, _, out = _rewritten(tmp_path, capsys, text)
  assert code == 1, out
  assert_places(out, "wmtlike", "batch is a global batch now")


def key_fed_back_by_keyword() -> str:
  """flax's nlp_seq as it stood in 2021 (google/flax at 866ce07b^): the
  step returns each device's next dropout key and the loop gives it back
  by keyword."""
  return HANDED.replace(
      "  keep = jax.random.bernoulli(dropout_rng, 0.9, batch[\"x\"].shape)",
      "  dropout_rng, new_dropout_rng = jax.random.split(dropout_rng)\n"
      "  keep = jax.random.bernoulli(dropout_rng, 0.9, batch[\"x\"].shape)"
  ).replace("  return new_params, metrics\n",
            "  return new_params, metrics, new_dropout_rng\n").replace(
                "    params, metrics = p_train_step(params, batch, "
                "dropout_rng=dropout_rngs)",
                "    params, metrics, dropout_rngs = p_train_step(\n"
                "        params, batch, dropout_rng=dropout_rngs)")


def test_a_key_per_device_fed_back_by_keyword_stays_stacked(tmp_path, capsys):
  # A keyword argument keeps pmap's stack, so that output does.
  text = key_fed_back_by_keyword()
  assert text.count("new_dropout_rng") == 2 and "metrics, dropout_rngs" in text
  code, source, port, out = _rewritten(tmp_path, capsys, text)
  assert code == 0 and "0 place(s) need a person" in out, out
  assert ("out_specs=(jax.P(), jax.P(\"batch\"), jax.P(\"batch\"))"
          in port.read_text()), port.read_text()
  assert _script_output(port) == _script_output(source)
