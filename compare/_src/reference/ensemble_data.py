"""ensemble_data on one device: the ensemble's reference, unchanged.

Every member trains on the whole global batch in both programs: splitting a
member's batch over the devices of its row changes only the order in which
its gradient is summed. So each member is the classic single-model program
on one device with the global batch, in turn (`compare._src.reference.ensemble`),
from the key the backends give it.
"""

from compare._src.reference import ensemble

VARIANTS = ensemble.VARIANTS
# put_batch takes the whole global batch, in every process alike.
PROCESS_LOCAL_BATCH = ensemble.PROCESS_LOCAL_BATCH
# Declared as the backends' (shardport.training.protocol): one device, never saved.
BACKEND = ensemble.BACKEND
STEP_TAKES_HOST_LOCAL = ensemble.STEP_TAKES_HOST_LOCAL
CHECKPOINTS = ensemble.CHECKPOINTS

make_placement = ensemble.make_placement
create_state = ensemble.create_state
put_batch = ensemble.put_batch
make_train_step = ensemble.make_train_step
make_evaluate = ensemble.make_evaluate
to_host = ensemble.to_host
metrics_to_host = ensemble.metrics_to_host


def why_unavailable():
  """None: the reference runs on any jax (as the backends declare theirs)."""
  return None
