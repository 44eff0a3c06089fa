"""What a run reports as it trains: step metrics, test summaries, history.

The training loop and `compare`'s runner log the same lines from the same
numbers, through these.
"""

import jax
import numpy as np


def global_devices(n_devices: int) -> int:
  """All processes' devices, `n_devices` per process."""
  return n_devices * jax.process_count()


def train_metrics(module, metrics) -> dict[str, float]:
  """A step's scalar metrics: `loss`, and `accuracy` where reported."""
  return scalar_metrics(module.metrics_to_host(metrics))


def scalar_metrics(host: dict) -> dict[str, float]:
  """`train_metrics` of metrics already fetched (`metrics_to_host`)."""
  return {k: float(np.asarray(host[k])) for k in ("loss", "accuracy")
          if k in host and np.ndim(host[k]) == 0}


def test_summary(program, module, config, sums) -> dict:
  """The program's test summary of `evaluate`'s metric sums."""
  return program.summarize(module.metrics_to_host(sums), config)


def history_line(step: int, since_eval: list[dict], test: dict) -> dict:
  """One evaluation: the train metrics' means since the last, then `test`."""
  return {"step": step, **{
      f"train_{k}": float(np.mean([m[k] for m in since_eval]))
      for k in since_eval[0]}, **test}
