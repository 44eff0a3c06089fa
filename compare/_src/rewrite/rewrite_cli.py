"""`python -m compare.rewrite`: files in, files and a report out.

    python -m compare.rewrite IN.py -o OUT.py [--global] [--report R.txt]
        [--prove SPEC]
    python -m compare.rewrite --in-tree DIR --out-tree DIR [--report R.txt]

Like `tf_upgrade_v2`: every change and every place left to a person, by file
and line. Exit 0 when everything was rewritten, 1 when something needs a
person (the files are still written), 2 on bad input (not Python, no pmap,
an output that cannot be written), with one line and nothing written.
"""

import argparse
import os
import pathlib
import shutil
import sys
import tempfile

from compare._src.rewrite import pipeline
from compare._src.rewrite import report
from compare._src.rewrite.proof import prove_flag
from compare._src.rewrite.records import NoPmapFound
from compare._src.rewrite.records import RewriteError
from shardport.launch import distributed
from shardport.launch import emulation
from shardport.launch import options

EXIT_DONE, EXIT_PERSON = 0, 1
EXIT_USAGE, EXIT_CRASH = prove_flag.EXIT_USAGE, prove_flag.EXIT_CRASH
_EPILOG = """\
examples:
  python -m compare.rewrite train.py -o train_port.py
  python -m compare.rewrite train.py -o train_port.py --prove my_team.prove:port
  python -m compare.rewrite train.py -o train_global.py --global
  python -m compare.rewrite mnist.py -o mnist_global.py --global --prove __main__
  python -m compare.rewrite --in-tree src/ --out-tree src_port/
  python -m compare.rewrite train.py -o port.py --prove team.prove:port --processes 2 --devices 4

exit codes:
  0  every pmap rewritten (and, with --prove, the proof passed)
  1  something needs a person (the files are still written), or the proof
     failed
  2  bad input: one line naming the flag or file, nothing written
  4  the rewrite or the proof crashed inside the tool (one line; the
     rewrite's crash writes nothing)

--prove runs on several devices: 8 emulated CPU devices unless XLA_FLAGS
sets a count (a 1-device mesh proves nothing and is refused). With
--processes P it runs in P local processes of --devices D each, joined by
jax.distributed (gloo), as `python -m compare --processes` does: the port
is written once, then proved where pmap's collectives span every process.
guide: docs/REWRITE.md
"""


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m compare.rewrite",
      formatter_class=argparse.RawDescriptionHelpFormatter,
      description="Rewrites every jax.pmap into jax.jit(jax.shard_map(...)) "
                  "and reports each change\nand each place left to a person.",
      epilog=_EPILOG)
  parser.add_argument("input", nargs="?", metavar="INPUT.py",
                      help="the pmap program, a .py file")
  parser.add_argument("-o", "--output", metavar="OUTPUT.py",
                      help="where the port is written")
  parser.add_argument("--in-tree", metavar="DIR",
                      help="a directory: every .py file in it")
  parser.add_argument("--out-tree", metavar="DIR", help="where the tree is "
                      "written (must not exist); files without pmap are "
                      "copied")
  parser.add_argument("--report", metavar="FILE",
                      help="also write the report to this file")
  parser.add_argument("--prove", metavar="PKG.MODULE:NAME", help=(
      "prove the rewrite: the team's compare.Port for the original program "
      "(or a function returning it), whose pmap_step is a pmap of INPUT.py "
      "(or jax.pmap of one of its functions); the rewritten step is proved "
      "against it. --global --prove __main__: a step made under `if "
      "__name__ == '__main__':`, proved by running both files as scripts"))
  parser.add_argument("--global", dest="global_step", action="store_true",
                      help="also the second step: the state placed once on "
                      "the mesh (P()), each batch one global array "
                      "(P(axis)), no replicate/shard/unreplicate/[0]; where "
                      "it cannot be taken, the first step is written and "
                      "each place reported. A step the file never calls "
                      "takes the layout --prove's Port declares")
  parser.add_argument("--steps", type=int, metavar="N", help="--prove's "
                      "steps (default: the Port's)")
  parser.add_argument("--devices", type=int, default=None, help="--prove's "
                      "devices per process; on CPU the emulated count "
                      "(default 8)")
  options.add_process_options(parser)
  return parser


def _check_processes(args) -> None:
  """RewriteError for process flags that do not go with this command."""
  try:
    options.check_positive(args)
    distributed.check(args)
  except options.UsageError as err:
    raise RewriteError(str(err)) from None
  if args.baseline:
    raise RewriteError("--baseline is python -m compare's; --prove "
                       "--processes P proves the port in P processes")
  many = (args.processes, args.devices, args.coordinator, args.num_processes,
          args.process_id)
  if (any(x is not None for x in many) or args.distributed) and not (
      args.prove):
    raise RewriteError("--processes, --devices and the worker flags run "
                       "--prove's proof: give --prove PKG.MODULE:NAME")


def _check_args(args) -> list[tuple[pathlib.Path, pathlib.Path]]:
  """`(input, output)` pairs, or RewriteError naming the flag."""
  if args.in_tree or args.out_tree:
    if args.input or args.output or args.prove:
      raise RewriteError("give IN.py -o OUT.py, or --in-tree and --out-tree, "
                         "not both (--prove takes one file)")
    if not (args.in_tree and args.out_tree):
      raise RewriteError("--in-tree and --out-tree go together")
    source, target = pathlib.Path(args.in_tree), pathlib.Path(args.out_tree)
    if not source.is_dir():
      raise RewriteError(f"--in-tree {source}: no such directory")
    if target.exists():
      raise RewriteError(f"--out-tree {target} exists: name a new directory")
    _check_writable(target.parent, "--out-tree")
    return [(path, target / path.relative_to(source))
            for path in sorted(source.rglob("*.py"))]
  if not args.input or not args.output:
    raise RewriteError("give the program and where to write its port: "
                       "IN.py -o OUT.py")
  source, target = pathlib.Path(args.input), pathlib.Path(args.output)
  if not source.is_file():
    raise RewriteError(f"{source}: no such file")
  if target.resolve() == source.resolve():
    raise RewriteError(f"-o {target} is the input: write the port beside it")
  _check_writable(target.parent, "-o")
  return [(source, target)]


def _check_writable(directory: pathlib.Path, flag: str) -> None:
  directory = directory if str(directory) else pathlib.Path(".")
  if not directory.is_dir() or not os.access(directory, os.W_OK):
    raise RewriteError(f"{flag}: cannot write in {directory}")


class RewriteCrash(Exception):
  """The rewrite itself failed on a file (a bug of the tool's, not the
  program's): one line naming the file, nothing written, exit 4."""


def _rewrite_all(pairs, tree: bool, global_step: bool = False,
                 declared: str | None = None):
  """Every file's `Rewrite` (None: no pmap, copied as it is), or raises.
  `declared`: the step the `--prove` Port declares (`--global`)."""
  results = []
  for source, target in pairs:
    try:
      text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
      raise RewriteError(f"{source}: cannot read it ({err})") from None
    try:
      if global_step:
        rewrite = pipeline.rewrite_global_source(text, str(source),
                                                       declared)
      else:
        rewrite = pipeline.rewrite_source(text, str(source))
      results.append((source, target, rewrite))
    except NoPmapFound as err:
      if not tree or err.other:  # a tree's file with no pmap is copied
        raise
      results.append((source, target, None))
    except RewriteError:
      raise  # bad input: one line, exit 2 (not a crash)
    except Exception as err:  # pylint: disable=broad-except
      raise RewriteCrash(f"the rewrite crashed on {source}: "
                         f"{type(err).__name__}: {err} (nothing written; "
                         "a bug of compare.rewrite's: please report it with "
                         "the file)") from err
  if tree and all(r is None for _, _, r in results):
    raise RewriteError("--in-tree: no jax.pmap found in any .py file")
  return results


def _write(results, tree_root: pathlib.Path | None) -> None:
  """Writes every output, all or nothing for a tree (a temporary tree moved
  into place), each file atomically."""
  staging = (pathlib.Path(tempfile.mkdtemp(dir=tree_root.parent))
             if tree_root else None)
  try:
    for source, target, rewrite in results:
      final = (staging / target.relative_to(tree_root)) if staging else target
      final.parent.mkdir(parents=True, exist_ok=True)
      if rewrite is None:
        shutil.copyfile(source, final)
        continue
      partial = final.with_name(final.name + ".partial")
      partial.write_text(rewrite.code, encoding="utf-8")
      os.replace(partial, final)
    if staging:
      os.replace(staging, tree_root)
  except BaseException:
    if staging:
      shutil.rmtree(staging, ignore_errors=True)
    raise


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  args = build_parser().parse_args(argv)
  try:
    _check_processes(args)
  except RewriteError as err:
    print(f"compare.rewrite: {err}", file=sys.stderr)
    return EXIT_USAGE
  if distributed.is_worker(args):
    return prove_flag.prove_as_worker(args)
  if args.prove:
    # As `python -m compare` does: 8 emulated CPU devices unless XLA_FLAGS
    # sets a count (a 1-device mesh is refused: `compare.prove`).
    # With --processes, the Port is loaded here to check it before anything
    # is written, on as many devices as the job has.
    emulation.set_cpu_device_count(None if args.processes is None else (
        args.processes * (args.devices or emulation.DEFAULT_DEVICES)))
  port = None
  try:
    pairs = _check_args(args)
    if args.report:
      _check_writable(pathlib.Path(args.report).parent, "--report")
    if args.steps is not None and (args.steps < 1 or not args.prove):
      raise RewriteError("--steps takes a positive count, with --prove")
    declared = None
    if args.prove:
      port = prove_flag.load_port(args.prove, args)
      if args.global_step:
        declared = prove_flag.declared_step(port, pairs[0][0])
    results = _rewrite_all(pairs, tree=bool(args.in_tree),
                           global_step=args.global_step, declared=declared)
    _write(results, pathlib.Path(args.out_tree) if args.out_tree else None)
  except RewriteError as err:
    print(f"compare.rewrite: {err}", file=sys.stderr)
    return EXIT_USAGE
  except RewriteCrash as err:
    print(f"compare.rewrite: {err}", file=sys.stderr)
    return EXIT_CRASH
  lines = report.report_lines(results, args.global_step)
  print("\n".join(lines))
  if args.report:
    pathlib.Path(args.report).write_text("\n".join(lines) + "\n",
                                         encoding="utf-8")
  code = (EXIT_PERSON if any(r and r.needs_a_person for _, _, r in results)
          else EXIT_DONE)
  if port is not None and args.processes is not None:
    # The port is written; each process proves it (`_prove_as_worker`).
    from shardport.launch import launcher  # pylint: disable=g-import-not-at-top,import-outside-toplevel
    code = max(code, launcher.launch(
        prog="compare.rewrite", module="compare.rewrite", argv=argv,
        processes=args.processes,
        devices=args.devices or emulation.DEFAULT_DEVICES,
        coordinator=args.coordinator))
  elif port is not None:
    code = max(code, prove_flag.prove(port, pairs[0], args, results[0][2]))
  elif not args.in_tree:
    print(_how_to_prove(results))
  return code


def _how_to_prove(results) -> str:
  """How to prove what was written: `--prove` for jax.pmap's ports; for
  another library's (which `--prove` does not take) a Port of one's own."""
  if any(rewrite is not None and rewrite.other_library
         for _, _, rewrite in results):
    return ("to prove it: compare.prove a compare.Port of the original "
            "step and the written one (examples/nnx_mlp, "
            "examples/equinox_mlp); --prove takes jax.pmap's ports only")
  return ("to prove it: --prove PKG.MODULE:NAME, the compare.Port of the "
          "original program (its pmap_step a pmap of this file); "
          "--global --prove __main__ for a step made under `if __name__ == "
          "'__main__':`")
