"""`python -m compare`: argument parsing, device setup, exit codes.

Exit 0 when every verdict passes, 1 when a pair differs, 2 on bad usage or
bad input (one line on stderr, no traceback). jax is imported only after the
emulated device count is set.
"""

import argparse
import datetime
import importlib
import os
import sys

from compare import report

STRATEGIES = ("data_parallel", "ensemble", "accumulation")
_COUNT_FLAG = "--xla_force_host_platform_device_count"


class UsageError(Exception):
  """Bad usage or input: reported in one line with exit code 2."""


class _Parser(argparse.ArgumentParser):

  def error(self, message):
    raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
  parser = _Parser(prog="python -m compare", description=__doc__.split("\n")[0])
  add = parser.add_argument
  add("--strategy", choices=STRATEGIES, default="ensemble")
  add("--workload", default=None,
      help="cnn (default), linreg (data_parallel), linear512 (accumulation)")
  add("--dataset", default=None,
      help="digits (default, offline), mnist, fashion_mnist, synthetic[:HxW][:N]")
  add("--data-dir", default=None, help="tensorflow-datasets data directory")
  add("--devices", type=int, default=None,
      help="devices to use; on CPU the emulated count (default 8)")
  add("--steps", type=int, default=None, help="optimiser steps")
  add("--batch-size", dest="global_batch", type=int, default=None,
      help="global batch, over all devices")
  add("--learning-rate", type=float, default=None)
  add("--seed", type=int, default=None)
  add("--members", type=int, default=None, help="ensemble members")
  add("--epochs", type=int, default=None, help="ensemble epochs")
  add("--member-loop", default=None,
      help="ensemble: sequential (default) or vmap, for several members "
           "per device")
  add("--accum-steps", type=int, default=None, help="microbatches per step")
  add("--accum-loop", default=None, help="microbatch loop (accumulation)")
  add("--windows", type=int, default=20, help="timing windows per run")
  add("--json", default=None, help="write the report here (atomically)")
  add("--plot", default=None, help="write a PNG here (ensemble)")
  add("--show-diff", default=None, metavar="PROGRAM",
      help="print the diff between the two backends' PROGRAM module and exit")
  return parser


def _check(args):
  for name in ("devices", "steps", "global_batch", "members", "epochs",
               "accum_steps", "windows"):
    value = getattr(args, name)
    if value is not None and value < 1:
      raise UsageError(f"--{name.replace('_', '-')} must be at least 1, "
                       f"got {value}")
  for path in (args.json, args.plot):
    if path:
      try:
        report.check_writable(path)
      except OSError as err:
        raise UsageError(str(err)) from None


def _set_device_count(devices):
  """Sets the emulated CPU device count, unless jax or the user already did."""
  flags = os.environ.get("XLA_FLAGS", "")
  if "jax" not in sys.modules and _COUNT_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {_COUNT_FLAG}={devices or 8}".strip()


def _run(args):
  import jax  # pylint: disable=g-import-not-at-top
  from compare import runner  # pylint: disable=g-import-not-at-top
  from workloads import datasets  # pylint: disable=g-import-not-at-top
  from workloads import registry  # pylint: disable=g-import-not-at-top

  available = jax.local_device_count()
  n_devices = args.devices or available
  if n_devices > available:
    raise UsageError(f"asked for {n_devices} devices, {available} exist")
  try:
    spec = importlib.import_module(f"compare.strategies.{args.strategy}").SPEC
  except ModuleNotFoundError:
    raise UsageError(f"strategy {args.strategy} is not built yet") from None
  options = {k: v for k, v in vars(args).items() if v is not None}
  options.setdefault("workload", "cnn")
  options["devices"] = n_devices
  try:
    workload = registry.get(options["workload"])
    data = datasets.load(options.get("dataset", workload.dataset),
                         args.data_dir)
    config = spec.make_config(options, data)
    result = runner.compare(spec, config, data, n_devices,
                            windows=args.windows, progress=sys.stderr.isatty())
  except ValueError as err:  # every input error in workloads/ and the backends
    raise UsageError(str(err)) from None
  full = {"schema": report.SCHEMA, "strategy": spec.name,
          "date": datetime.date.today().isoformat(),
          "workload": config.workload, "dataset": config.dataset,
          "platform": jax.devices()[0].platform, "devices": n_devices,
          "processes": jax.process_count(), "jax_version": jax.__version__,
          "steps": config.steps, "global_batch": config.global_batch,
          "seed": config.seed,
          **(spec.extra_report(config) if spec.extra_report else {}),
          **result}
  full["throughput_ratio_shard_map_vs_pmap"] = report.throughput_ratio(full)
  print(report.table(full))
  if args.plot and spec.plot:
    spec.plot(full, args.plot)
  if args.json:
    report.write_json(full, args.json)
  return 0 if full["verdict"] == "pass" else 1


def main(argv=None) -> int:
  """Parses `argv`, runs the comparison, returns the exit code."""
  try:
    args = build_parser().parse_args(argv)
    _check(args)
    if args.show_diff:
      from compare import show_diff  # pylint: disable=g-import-not-at-top
      try:
        print(show_diff.program_diff(args.show_diff))
      except ValueError as err:
        raise UsageError(str(err)) from None
      return 0
    _set_device_count(args.devices)
    return _run(args)
  except UsageError as err:
    print(f"compare: error: {err}", file=sys.stderr)
    return 2
