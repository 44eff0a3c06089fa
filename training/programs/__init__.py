"""Every training program, by name: what the training loop needs of each.

`python -m legacy_pmap.train` and `python -m sharded.train` take their
`--strategy` choices from `PROGRAMS`; `compare._src.strategies` extends each
program with how it is judged.
"""

from training.programs.accumulation import AccumulationProgram
from training.programs.base import Program
from training.programs.base import summarize_sums
from training.programs.data_parallel import DataParallelProgram
from training.programs.ensemble import EnsembleProgram
from training.programs.ensemble_data import EnsembleDataProgram
from training.programs.fsdp import FsdpProgram
from workloads import configs

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
