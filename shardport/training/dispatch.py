"""How steps are dispatched: one optimiser step of several calls, and how
many steps may be queued before waiting.

Both the training loop and `compare`'s runner step their programs through
these, so that every backend is dispatched alike.
"""

import jax


def max_in_flight() -> int:
  """Steps that may be queued before waiting for the oldest.

  On XLA:CPU with emulated devices, queueing steps that hold collectives
  (tens of CNN steps, hundreds of tiny ones) can leave some devices' threads
  parked at a later step's all-reduce while others still need one for an
  earlier step: the rendezvous aborts the process after 40 s (measured here,
  jax 0.10.2, 2 cores, even with --xla_cpu_multi_thread_eigen=false). So CPU
  steps are waited for one by one, for every backend alike; accelerators
  keep their dispatch queue.
  """
  return 1 if jax.devices()[0].platform == "cpu" else 1_000_000


def optimizer_step(step, calls):
  """`step` called `calls` times on the same batch: one optimiser step.

  Under optax.MultiSteps each call takes one microbatch and every K-th
  updates the params; the loss is the mean over the calls. On CPU each call
  is waited for (`max_in_flight`).
  """
  if calls == 1:
    return step

  def whole_step(state, batch):
    losses = []
    for _ in range(calls):
      state, metrics = step(state, batch)
      losses.append(metrics["loss"])
      if max_in_flight() == 1:
        jax.block_until_ready(state)
    return state, {"loss": sum(losses[1:], losses[0]) / calls}

  return whole_step
