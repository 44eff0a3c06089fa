"""The command line both backends' train.py share: options, checks, exit codes.

`python -m legacy_pmap.train` / `python -m sharded.train` take compare's run
options (`shardport.launch.options`) plus `--workdir`, `--eval-every`,
`--checkpoint-every` and `--max-to-keep`. Exit 0 when the run finished, 4
when it raised (its traceback, then `train: crashed: ERROR (at step N;
exit 4)`), 2 on bad usage or input (one line on stderr, `train: error:
...`): options, devices, the workdir, or a checkpoint there written by
another run, all found before anything compiles (replicas of a classic
checkpoint that differ are found as it is restored, before the first
step). The caller sets
the emulated device count before this module is imported: the registry
imports jax.
"""

import sys
import traceback

from shardport import strategies
from shardport.launch import crash
from shardport.launch import distributed
from shardport.launch import emulation
from shardport.launch import options
from shardport.training import checkpoints
from shardport.training import workdir as workdirs

EXIT_DONE, EXIT_USAGE, EXIT_CRASH = 0, 2, crash.EXIT_CRASH


def build_parser(backend: str) -> options.Parser:
  """The training program's parser: compare's run options and its own."""
  parser = options.Parser(prog=f"python -m {backend}.train",
                          description=__doc__.split("\n")[0])
  options.add_run_options(parser, tuple(strategies.STRATEGIES))
  options.add_process_options(parser)
  add = parser.add_argument
  add("--workdir", required=True,
      help="checkpoints, metrics.jsonl and result.json go here; a run "
           "started again resumes from its newest complete checkpoint")
  add("--eval-every", type=int, default=None,
      help="steps between test evaluations (default: the strategy's)")
  add("--checkpoint-every", type=int, default=50,
      help="steps between checkpoints; 0: the last step only (always saved)")
  add("--max-to-keep", type=int, default=3, help="checkpoints kept on disk")
  return parser


def _check(args):
  options.check_positive(args)
  for flag, value, least in (("--eval-every", args.eval_every, 1),
                             ("--checkpoint-every", args.checkpoint_every, 0),
                             ("--max-to-keep", args.max_to_keep, 1)):
    if value is not None and value < least:
      raise options.UsageError(f"{flag} must be at least {least}, got {value}")
  distributed.check(args)


def _launch(backend, args, argv):
  """`--processes P`: P local workers (`shardport.launch.launcher`) sharing the
  workdir, and with `--baseline` the same job in one process with all the
  devices, in a workdir of its own."""
  import os  # pylint: disable=g-import-not-at-top
  from shardport.launch import baseline  # pylint: disable=g-import-not-at-top
  from shardport.launch import launcher  # pylint: disable=g-import-not-at-top
  launch = dict(prog="train", module=f"{backend}.train",
                processes=args.processes,
                devices=args.devices or emulation.DEFAULT_DEVICES,
                coordinator=args.coordinator, normal=(EXIT_DONE, EXIT_USAGE))
  if not args.baseline:
    return launcher.launch(argv=argv, **launch)
  return baseline.launch_with_baseline(
      argv=argv, result_path=os.path.join(args.workdir, "result.json"),
      result_argv=lambda into: (["--workdir", f"{into}/work"],
                                f"{into}/work/result.json"),
      kind=baseline.train_baseline, **launch)


def _prepare(backend, args):
  """The job, with every input checked; nothing compiled."""
  from shardport.training import inputs  # pylint: disable=g-import-not-at-top
  from shardport.training import loop  # pylint: disable=g-import-not-at-top
  checked = inputs.prepare(strategies.get(args.strategy), args)
  schedule = loop.Schedule(args.eval_every, args.checkpoint_every,
                           args.max_to_keep)
  return loop.prepare(backend, checked.program, checked.config, args.workdir,
                      data=checked.data, n_devices=checked.n_devices,
                      schedule=schedule)


def _quiet_orbax():
  """Orbax logs every save at INFO/WARNING through absl: keep stderr ours."""
  import absl.logging  # pylint: disable=g-import-not-at-top
  absl.logging.set_verbosity(absl.logging.ERROR)


def main(backend: str, argv=None) -> int:
  """Parses `argv`, trains with `backend`'s modules, returns the exit code."""
  argv = sys.argv[1:] if argv is None else list(argv)
  distributed.die_with_launcher()
  args = None
  try:
    args = build_parser(backend).parse_args(argv)
    _check(args)
    if distributed.is_launcher(args):
      return _launch(backend, args, argv)
    distributed.quiet_native_stdout()
    if distributed.is_worker(args):
      distributed.join(args)
    from shardport.training import loop  # pylint: disable=g-import-not-at-top
    _quiet_orbax()
    try:
      job = _prepare(backend, args)
    except ValueError as err:  # every input error, before compiling
      raise options.UsageError(str(err)) from None
    try:
      result = loop.run(job, progress=sys.stderr.isatty())
    except (checkpoints.CheckpointError, workdirs.WorkdirError) as err:
      raise options.UsageError(str(err)) from None
  except options.UsageError as err:
    print(f"train: error: {err}", file=sys.stderr)
    return EXIT_USAGE
  except Exception as err:  # pylint: disable=broad-except
    # The traceback for whoever debugs it, then one line a log ends with
    # (the launcher quotes it): the error and its step (`loop._train`).
    traceback.print_exc(file=sys.stderr)
    print(crash.line("train", err), file=sys.stderr)
    return crash.end(args is not None and distributed.is_worker(args))
  if not distributed.is_main_process():
    return EXIT_DONE
  accuracy = result.get("test_accuracy")
  print(f"step {result['steps']}: test_loss {result['test_loss']:.4g}"
        f"{f' test_accuracy {accuracy:.4f}' if accuracy is not None else ''}"
        f" state_digest {result['state_digest'][:16]} "
        f"({job.workdir}/result.json)")
  return EXIT_DONE
