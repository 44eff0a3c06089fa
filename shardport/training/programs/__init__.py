"""Every training program, by name: what the training loop needs of each.

`python -m legacy_pmap.train` and `python -m sharded.train` take their
`--strategy` choices from `PROGRAMS`; `compare._src.strategies` extends each
program with how it is judged.
"""

from shardport.training.programs.accumulation import AccumulationProgram
from shardport.training.programs.base import Program
from shardport.training.programs.base import summarize_sums
from shardport.training.programs.data_parallel import DataParallelProgram
from shardport.training.programs.ensemble import EnsembleProgram
from shardport.training.programs.ensemble_data import EnsembleDataProgram
from shardport.training.programs.fsdp import FsdpProgram
from shardport.workloads import configs

PROGRAMS: dict[str, Program] = {}


class ProgramError(configs.ConfigError):
  """An unknown program (`--strategy`) name."""


def register(program: Program) -> Program:
  """Adds `program` to `PROGRAMS` under its name; returns it."""
  PROGRAMS[program.name] = program
  return program


def get(name: str) -> Program:
  """The program called `name`."""
  if name not in PROGRAMS:
    raise ProgramError(f"unknown strategy {name!r}; choose one of "
                       f"{', '.join(PROGRAMS)}")
  return PROGRAMS[name]


for _program in (DataParallelProgram(), EnsembleProgram(),
                 AccumulationProgram(), EnsembleDataProgram(),
                 FsdpProgram()):
  register(_program)

__all__ = ["PROGRAMS", "AccumulationProgram", "DataParallelProgram",
           "EnsembleDataProgram", "EnsembleProgram", "FsdpProgram", "Program",
           "ProgramError", "get", "register", "summarize_sums"]
