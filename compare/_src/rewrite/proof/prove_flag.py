"""`--prove`'s part of `python -m compare.rewrite`.

The Port is loaded (`load_port`) and the step it declares read
(`declared_step`) before anything is written; the proof (`prove`) runs
after the port and its report are written, in this process or in each of
`--processes` (`prove_as_worker`). jax is imported only inside: the
command sets the emulated device count first.
"""

import pathlib
import sys

from compare._src.rewrite.records import RewriteError
from shardport.launch import distributed
from shardport.launch import emulation
from shardport.launch import options

EXIT_USAGE, EXIT_CRASH = 2, 4
# `--prove __main__`: the Port is made of both files run as scripts
# (`script_proof`), for a step made where no Port can import it.
SCRIPTS, SCRIPT_STEPS = "__main__", 4


def load_port(spec: str, args):
  """The Port `--prove` names (`__main__`: made when proved, from both
  files run as scripts), or RewriteError: before anything is written."""
  from compare._src.prove import port as port_module  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  if spec == SCRIPTS:
    if not args.global_step or args.processes is not None:
      raise RewriteError("--prove __main__ proves a --global rewrite in one "
                         "process")
    return spec
  try:
    return port_module.load(spec)
  except port_module.PortError as err:
    raise RewriteError(str(err).replace("--program", "--prove")) from None


def declared_step(port, source: pathlib.Path):
  """The step of `source` whose layout the Port declares (its `pmap_step`,
  or the step a `compare.adapt_step` adapts), as a
  `pipeline.Declared`; None where `source` names neither."""
  from compare._src.rewrite.proof import rewrite_proof  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  if port == SCRIPTS:
    return None  # the scripts' Port is made when proved
  return rewrite_proof.declared_step(port, source)


def prove(port, pair, args, rewrite=None) -> int:
  """`--prove`: the proof's exit code, 2 for a Port that cannot be proved,
  4 for a crash (the rewrite and its report are written by then).
  `rewrite`: the writer's records of the file proved (`records.Rewrite`);
  None in a worker, which makes them again as its launcher did."""
  from compare._src.rewrite.proof import rewrite_proof  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  from compare._src.prove.port import PortError  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  try:
    written = None
    if port == SCRIPTS:
      from compare._src.rewrite.proof import script_proof  # pylint: disable=g-import-not-at-top,import-outside-toplevel
      port, written = script_proof.port_of_scripts(
          *pair, args.steps or SCRIPT_STEPS, rewrite)
    return rewrite_proof.prove(port, *pair, steps=args.steps,
                               global_step=args.global_step, written=written,
                               rewrite=rewrite)
  except PortError as err:
    print(f"compare.rewrite: {err}", file=sys.stderr)
    return EXIT_USAGE
  except Exception as err:  # pylint: disable=broad-except
    print(f"compare.rewrite: the proof crashed: {type(err).__name__}: "
          f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}"
          " (the rewrite and its report are written)", file=sys.stderr)
    return EXIT_CRASH


def prove_as_worker(args) -> int:
  """One process of `--prove --processes P`: joins the job and proves the
  port the launcher wrote (`-o`); process 0's report is the job's."""
  distributed.die_with_launcher()
  distributed.quiet_native_stdout()
  emulation.set_cpu_device_count(args.devices)
  try:
    distributed.join(args)
    pair = (pathlib.Path(args.input), pathlib.Path(args.output))
    if not pair[1].is_file():
      raise RewriteError(f"-o {pair[1]}: not written (a worker proves the "
                         "port its launcher wrote)")
    port = load_port(args.prove, args)
  except (RewriteError, options.UsageError) as err:
    print(f"compare.rewrite: {err}", file=sys.stderr)
    return EXIT_USAGE
  return prove(port, pair, args)
