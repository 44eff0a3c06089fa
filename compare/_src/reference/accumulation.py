"""The accumulation program's ground truth: one step on the global batch.

No microbatches and no accumulation: one device, the whole global batch, the
data-parallel loss normalisation (sum / n_devices for the CNN). Accumulating
K equal microbatches averages K gradients that each stand for 1/K of a
shard, so it must land here up to summation order (mean-of-means semantics).
The state is the workload's own (never optax.MultiSteps-wrapped): the ports'
`to_host` unwrap theirs to this layout.
"""

from compare._src.reference import data_parallel

VARIANTS = ("reference",)
PROCESS_LOCAL_BATCH = False
BACKEND = data_parallel.BACKEND
STEP_TAKES_HOST_LOCAL = data_parallel.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = data_parallel.CHECKPOINTS
make_placement = data_parallel.make_placement
create_state = data_parallel.create_state
put_batch = data_parallel.put_batch
make_evaluate = data_parallel.make_evaluate
to_host = data_parallel.to_host
metrics_to_host = data_parallel.metrics_to_host


def make_train_step(config, placement, variant="reference"):
  """One step on the global batch with the ports' loss normalisation.

  Ignores `config.accum_steps` and `config.accum_loop` on purpose.
  """
  return data_parallel.make_train_step(config, placement, variant)
