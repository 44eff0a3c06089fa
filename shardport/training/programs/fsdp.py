"""fsdp: data parallelism with the train state sharded over the devices."""

from shardport.training.programs.data_parallel import DataParallelProgram


class FsdpProgram(DataParallelProgram):
  """data_parallel's program, defaults and input checks (the batch must
  divide over the devices); params and optimiser state are split over the
  devices (`shardport.workloads.fsdp`)."""

  name = "fsdp"
  program = "fsdp"
  restores = ("data_parallel",)
