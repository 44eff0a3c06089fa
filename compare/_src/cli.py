"""`python -m compare`: its command line, checked, run and given an exit code.

Exit 0 when every verdict passes, 1 when a pair differs, 2 on bad usage or
bad input (one line on stderr, no traceback, before anything compiles), 3
when training diverged (non-finite loss or parameters). jax is imported only
after the emulated device count is set.
"""

import argparse
import dataclasses
import sys
import textwrap
import traceback

from shardport.launch import crash
from shardport.launch import distributed
from shardport.launch import emulation
from shardport.launch import files
from shardport.launch import options
from compare._src.prove import progress
from compare._src.prove import report
from shardport import strategies
from shardport.workloads import registry
from compare._src.prove import switch
from compare._src.prove import sweep

EXIT_PASS, EXIT_DIFFER, EXIT_USAGE, EXIT_DIVERGED = 0, 1, 2, 3
# The tool itself (or a step at run time) raised: not a verdict, so not 1.
EXIT_CRASH = crash.EXIT_CRASH
UsageError = options.UsageError


def _epilog() -> str:
  """Defaults per strategy, negative controls, exit codes and examples."""
  lines = ["defaults (steps, --batch-size, --learning-rate) and negative",
           "controls, per strategy:"]
  for name, strategy in sorted(strategies.STRATEGIES.items()):
    workload = registry.get(strategy.workloads[0])
    fields = {f.name: f.default
              for f in dataclasses.fields(strategy.config_class)}
    config = {**fields, **strategy.defaults, **workload.defaults}
    steps = (f"{config['epochs']} epochs" if "epochs" in config
             and config.get("epochs") else f"{config['steps']} steps")
    lines.append(f"  {name}: {steps}, batch {config['global_batch']}, "
                 f"learning rate {config['learning_rate']}")
    controls = ", ".join(c.name + (":N" if c.at_step else "")
                         for c in strategy.negative_controls)
    lines += textwrap.wrap(f"--negative-control {controls}", 76,
                           initial_indent="    ", subsequent_indent="      ")
  return "\n".join(lines + [
      "",
      "exit codes:",
      "  0  every verdict passes",
      "  1  a pair differs",
      "  2  bad usage or input (one line, before anything compiles)",
      "  3  training diverged",
      "  4  the tool crashed (what was measured is kept; --traceback)",
      "",
      "examples (8 emulated CPU devices; seconds to a minute on 2 cores):",
      "  python -m compare --strategy data_parallel --workload linreg "
      "--steps 20 --json out.json",
      "  python -m compare --program examples.linear_regression.prove:port "
      "--plot out.png",
      "",
      "guide: docs/MIGRATION.md"])


def build_parser() -> options.Parser:
  """The parser; `--strategy` and `--show-diff` choices come from the registry."""
  parser = options.Parser(
      prog="python -m compare", epilog=_epilog(),
      formatter_class=argparse.RawDescriptionHelpFormatter,
      description="Runs a program on pmap and on its shard_map (and jit) "
                  "ports from the same state on the same data,\nproves they "
                  "compute the same numbers, and times them on the same "
                  "devices.")
  options.add_run_options(parser, tuple(strategies.STRATEGIES),
                          default_strategy=None)
  options.add_process_options(parser)
  add = parser.add_argument
  add("--program", default=None, metavar="PKG.MODULE:NAME",
      help="prove a team's own port: NAME is a compare.Port, or a function "
           "of no arguments that returns one")
  add("--negative-control", default=None, metavar="NAME[:N]",
      help="plant a known mistake in the port (the verdict must fail); "
           "update-1pct-from:N and update-1pct-at:N start at step N")
  add("--calibration-runs", type=int, default=0, metavar="N",
      help="with --program: also train pmap's program again N times (0-3) "
           "on batches nudged by one ulp, shown beside the final state, not "
           "judged (each holds a copy of the state; default none)")
  add("--check-every", type=int, default=1, metavar="K",
      help="lockstep checks at step 1, every K-th step and the last "
           "(default 1: every step)")
  add("--switch-at", type=int, default=None, metavar="N",
      help="the port's runs restore pmap's step-N checkpoint and continue")
  add("--sweep-devices", default=None, metavar="N,N,...",
      help="compare on each of these device counts (e.g. 1,2,4,8)")
  add("--traceback", action="store_true",
      help="print the traceback of a crash, and with --program of the "
           "team's code that "
           "raised before the one-line error")
  add("--quiet", action="store_true",
      help="no progress lines on stderr (the report is still printed)")
  add("--windows", type=int, default=10,
      help="timing windows per run, 0: not timed (default %(default)s)")
  add("--json", default=None, metavar="PATH",
      help="write the report here (atomically)")
  add("--plot", default=None, metavar="PATH",
      help="write a PNG of the curves and the verdict here")
  add("--show-diff", default=None, metavar="PROGRAM",
      choices=sorted({s.program for s in strategies.STRATEGIES.values()}),
      help="print the diff between the two backends' PROGRAM module and exit")
  return parser


# What a `--program` run takes from the command line; the program itself
# fixes the rest (its mesh, batches, optimiser).
_PROGRAM_FLAGS = ("program", "devices", "steps", "negative_control",
                  "check_every", "windows", "json", "plot", "traceback",
                  "quiet", "calibration_runs")


def _process_actions(parser):
  """The actions `options.add_process_options` adds."""
  probe = options.Parser(prog="probe")
  options.add_process_options(probe)
  flags = {s for a in probe._actions for s in a.option_strings}  # pylint: disable=protected-access
  return [a for a in parser._actions  # pylint: disable=protected-access
          if set(a.option_strings) & flags and a.dest != "help"]


def _check_program(args):
  """`--program` with flags that belong to our strategies is bad usage;
  the process flags run the team's program in many processes."""
  parser = build_parser()
  processes = _process_actions(parser)
  for action in parser._actions:  # pylint: disable=protected-access
    name = action.dest
    if name in _PROGRAM_FLAGS or name == "help" or action in processes:
      continue
    if getattr(args, name, None) == action.default:
      continue
    raise UsageError(f"--program does not go with "
                     f"{action.option_strings[0]} (the program fixes it)")


def _check(args):
  if args.calibration_runs and not args.program:
    raise UsageError("--calibration-runs goes with --program (our "
                     "strategies train their own calibration runs)")
  if args.program:
    _check_program(args)
  elif args.strategy is None:
    args.strategy = options.DEFAULT_STRATEGY
  options.check_positive(args)
  if args.windows < 0:
    raise UsageError(f"--windows must be 0 (not timed) or more, got "
                     f"{args.windows}")
  if args.check_every < 1:
    raise UsageError(f"--check-every must be at least 1, got "
                     f"{args.check_every}")
  distributed.check(args)
  if args.sweep_devices and (distributed.is_launcher(args)
                             or distributed.is_worker(args)):
    raise UsageError("--sweep-devices runs in one process; it does not go "
                     "with --processes or a multi-process job")
  for flag, path in (("--json", args.json), ("--plot", args.plot)):
    if path:
      try:
        files.check_writable(path, flag)
      except OSError as err:
        raise UsageError(str(err)) from None


def _prepare(args):
  """Everything that can be wrong with the input, checked before compiling.

  Returns:
    `(plans, config, n_devices, control)`: the strategy planned for each
    device count (`--sweep-devices`' counts, else the per-process devices).
  """
  from compare._src import ports  # pylint: disable=g-import-not-at-top
  from shardport.training import inputs  # pylint: disable=g-import-not-at-top
  strategy = strategies.get(args.strategy)
  try:
    counts = sweep.parse(args.sweep_devices) if args.sweep_devices else ()
    checked = inputs.prepare(strategy, args, counts)
    config = checked.config
    control = (strategy.control(args.negative_control)
               if args.negative_control else None)
    if control and control.step and control.step > config.steps:
      raise UsageError(f"--negative-control {control.name}: step "
                       f"{control.step} is past the last step "
                       f"({config.steps})")
    plans = {n: ports.planned(strategy, config, checked.data, n, control)
             for n in counts or (checked.n_devices,)}
    if args.switch_at is not None:
      switch.check(plans[checked.n_devices], config, args.switch_at)
  except ValueError as err:  # every input error of the strategy's options
    raise UsageError(str(err)) from None
  return plans, config, checked.n_devices, control


def _run_program(args):
  """`--program PKG.MODULE:NAME`: a team's port, proved."""
  from compare._src.prove import port  # pylint: disable=g-import-not-at-top
  from compare._src.prove import proof  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  try:
    progress.phase(f"loading {args.program}")
    program = port.load(args.program)
    devices = (None if args.devices is None
               else args.devices * jax.process_count())
    if devices is not None and devices != program.mesh.size:
      raise UsageError(f"--devices {args.devices}: the program's mesh has "
                       f"{program.mesh.size} devices (its Port fixes them; "
                       "leave --devices out)")
    result = proof.prove(program, steps=args.steps,
                         control=args.negative_control,
                         check_every=args.check_every, windows=args.windows,
                         progress=sys.stderr.isatty(),
                         calibration_runs=args.calibration_runs)
  except ValueError as err:  # PortError, or an unknown negative control
    if args.traceback and err.__cause__ is not None:
      traceback.print_exception(err.__cause__, file=sys.stderr)
    raise UsageError(str(err)) from None
  distributed.barrier("report")
  if distributed.is_main_process():
    _show(args, result)
  return result.exit_code


def _run(args):
  from compare._src.prove import proof  # pylint: disable=g-import-not-at-top

  progress.phase("loading the data and checking the options")
  plans, config, n_devices, control = _prepare(args)
  strategy = strategies.get(args.strategy)
  if args.sweep_devices:
    result = sweep.run(plans, config, args.windows)
    full = {**proof.describe(plans[max(plans)], config, max(plans), control),
            **strategy.report_fields(config), **result}
  else:
    full = _with_additions(strategy, config, proof.prove_plan(
            plans[n_devices], config, n_devices, windows=args.windows,
            progress=sys.stderr.isatty(), check_every=args.check_every,
            switch_at=args.switch_at))
  if full["pmap_runtime_warning"]:
    print(f"compare: warning: {full['pmap_runtime_warning']}",
          file=sys.stderr)
  # Every process computed the same report; process 0 alone shows it, once
  # every process got this far (a process lost before leaves no JSON).
  distributed.barrier("report")
  if distributed.is_main_process():
    # A sweep prints its table alone: a strategy's lines read one proof's
    # runs, which a sweep's report holds per device count.
    lines = () if args.sweep_devices else tuple(strategy.report_lines(full))
    _show(args, proof.Proof(full, lines, strategy.plot_members))
  return {"pass": EXIT_PASS, "fail": EXIT_DIFFER}.get(full["verdict"],
                                                       EXIT_DIVERGED)


def _with_additions(strategy, config, report: dict) -> dict:
  """`report` with what only `strategy` prints: its fields, its runs'
  fields and its loss convention (the CLI's, never the engine's)."""
  runs = {name: {**run, **strategy.run_fields(config, name)}
          for name, run in report["runs"].items()}
  return {**report, **strategy.report_fields(config), "runs": runs,
          "loss_convention": strategy.loss_convention}


def _show(args, result):
  """Prints the report (`result`, a `Proof`) and writes its plot and JSON."""
  full = result.report
  progress.release()
  progress.phase("done: the report follows")
  if args.sweep_devices:
    print("\n".join([*report.fit(report.header(full), indent=2),
                     *sweep.table(full),
                     f"verdict: {full['verdict']}"]))
  else:
    print(result.table())
  # The JSON first: what was measured is kept whatever the plot does.
  if args.json:
    files.write_json(full, args.json)
  if args.plot:
    if args.sweep_devices:
      sweep.plot(full, args.plot)
    else:
      result.plot(args.plot)


def _launch(args, argv):
  """`--processes P`: P local workers (`shardport.launch.launcher`), and with
  `--baseline` the same comparison in one process with all the devices."""
  import tempfile  # pylint: disable=g-import-not-at-top
  from shardport.launch import baseline  # pylint: disable=g-import-not-at-top
  from shardport.launch import launcher  # pylint: disable=g-import-not-at-top
  devices = args.devices or emulation.DEFAULT_DEVICES
  launch = dict(prog="compare", module="compare", processes=args.processes,
                devices=devices, coordinator=args.coordinator)
  if not args.baseline:
    return launcher.launch(argv=argv, **launch)
  with tempfile.TemporaryDirectory(prefix="shardport-compare-") as folder:
    path = args.json or f"{folder}/report.json"
    return baseline.launch_with_baseline(
        argv=[*argv, "--json", path], normal=(0, 1, 2, 3), result_path=path,
        result_argv=lambda into: (["--json", f"{into}/result.json",
                                   "--plot", ""], f"{into}/result.json"),
        kind=baseline.compare_baseline, **launch)


def main(argv=None) -> int:
  """Parses `argv`, runs the comparison, returns the exit code."""
  argv = sys.argv[1:] if argv is None else list(argv)
  distributed.die_with_launcher()
  args = None
  try:
    args = build_parser().parse_args(argv)
    _check(args)
    if args.show_diff:
      from compare._src import show_diff  # pylint: disable=g-import-not-at-top
      print(show_diff.program_diff(args.show_diff))
      return EXIT_PASS
    if distributed.is_launcher(args):
      return _launch(args, argv)
    # A worker of many processes is quiet: process 0 speaks for the job.
    progress.hold()
    progress.set_quiet(args.quiet or distributed.is_worker(args))
    distributed.quiet_native_stdout()
    emulation.set_cpu_device_count(args.devices)
    if distributed.is_worker(args):
      distributed.join(args)
    if args.program:
      return _run_program(args)
    return _run(args)
  except UsageError as err:
    print(f"compare: error: {err}", file=sys.stderr)
    return EXIT_USAGE
  except Exception as err:  # pylint: disable=broad-except
    # A crash is not a verdict: its own exit code and one line a CI log
    # ends with; the traceback behind --traceback.
    if "--traceback" in argv:
      traceback.print_exc(file=sys.stderr)
    print(crash.line("compare", err, "; --traceback shows where"),
          file=sys.stderr)
    return crash.end(args is not None and distributed.is_worker(args))
