"""The rewrite of multi-host pmap programs, run as their authors run them.

    python -m bench.probes.rewrite_many_hosts [--processes 2 --devices 4]

Each program of tests/rewrite_inputs written for many hosts (it joins the
job named by COORDINATOR, NUM_PROCESSES and PROCESS_ID, and reads its own
rows of the data) is rewritten by `python -m compare.rewrite`, the first
step and `--global`, and the original and both ports are run in P
processes of D emulated CPU devices joined by `jax.distributed` with gloo,
and in 1 process of P x D. Every line each process prints must equal the
original's, bitwise. Two plants, each step's mesh over this process's
devices alone (what the rewrite wrote before it spanned every process),
show that the comparison can fail. Prints one row per run.
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile

from shardport.launch import launcher

ROOT = pathlib.Path(__file__).resolve().parents[2]
INPUTS = ROOT / "tests" / "rewrite_inputs"
PROGRAMS = ("multihost_tutorial", "multihost_train")
# The first step's mesh over every process's devices, and the plant that
# builds it over this process's alone.
GLOBAL_DEVICES = ("    devices = [device for process in "
                  "range(jax.process_count())\n")
LOCAL_DEVICES = "    devices = jax.local_devices()  # plant\n    _ = [0 for process in ()\n"
# `--global`'s mesh, set after the join, and its plant.
GLOBAL_MESH = "sorted(jax.devices(), key=lambda d: d.process_index)"
LOCAL_MESH = "jax.local_devices()"


# Runs a script as `python SCRIPT` does, its Python output to a file of its
# own: gloo writes its connection lines to the same stdout from C++ threads,
# in pieces that can land inside a line of the program's.
_AS_MAIN = ("import os, runpy, sys; out = open(sys.argv.pop(), 'w'); "
            "sys.stdout = out; sys.argv.pop(0); "
            "sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0])); "
            "runpy.run_path(sys.argv[0], run_name='__main__'); out.flush()")


class JobError(RuntimeError):
  """A process of the job failed or the job ran past its time."""


def run_job(script: pathlib.Path, processes: int, devices: int,
            timeout: float = 300) -> list[str]:
  """Runs `python SCRIPT` as `processes` processes of `devices` emulated
  CPU devices each, joined through the environment the script reads;
  returns what each process printed. Raises JobError naming the first process
  that failed, with its last lines of stderr; no process outlives it."""
  port = launcher.free_port()
  workers = []
  for index in range(processes):
    env = {name: value for name, value in
           launcher.worker_env(devices, processes * devices).items()
           if not name.startswith(("JAX_COMPILATION_CACHE",
                                   "JAX_PERSISTENT_CACHE"))}
    if processes > 1:
      env.update(COORDINATOR=f"127.0.0.1:{port}",
                 NUM_PROCESSES=str(processes), PROCESS_ID=str(index))
    out_file = tempfile.NamedTemporaryFile("r", suffix=".out")
    workers.append((out_file, subprocess.Popen(
        [sys.executable, "-c", _AS_MAIN, str(script), out_file.name],
        cwd=ROOT, env=env, text=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)))
  try:
    errors = [worker.communicate(timeout=timeout)[1] for _, worker in workers]
  except subprocess.TimeoutExpired:
    raise JobError(f"{script.name}: still running after {timeout} s") from None
  finally:
    for _, worker in workers:
      if worker.poll() is None:
        worker.kill()
        worker.wait()
  for index, ((_, worker), err) in enumerate(zip(workers, errors)):
    if worker.returncode:
      tail = "\n".join(err.strip().splitlines()[-3:])
      raise JobError(f"{script.name}: process {index} exited with "
                     f"{worker.returncode}:\n{tail}")
  outputs = [out_file.read() for out_file, _ in workers]
  for out_file, _ in workers:
    out_file.close()
  return outputs


# Runs each program named on its command line as `python PROGRAM` does,
# printing what it printed under a line naming it. The job is joined once:
# a later program's `join()` sees no COORDINATOR (jax.distributed is
# initialised once a process).
_RUNNER = '''
import contextlib, io, os, runpy, sys
for path in sys.argv[1:]:
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    runpy.run_path(path, run_name="__main__")
  os.environ.pop("COORDINATOR", None)
  print(f"=== {os.path.basename(path)}\\n{out.getvalue()}", end="")
'''


def run_programs(workdir: pathlib.Path, scripts, processes: int,
                 devices: int) -> list[dict[str, str]]:
  """Runs `scripts` one after another in one job (`run_job`): one start-up
  and one join for all of them. Returns, per process, what each script
  printed, by its file's stem."""
  command = workdir / f"job_{processes}x{devices}.py"
  programs = [str(script) for script in scripts]
  command.write_text(f"import sys\nsys.argv[1:] = {programs!r}\n" + _RUNNER)
  found = []
  for out in run_job(command, processes, devices):
    runs = {}
    for chunk in out.split("=== ")[1:]:
      name, _, printed = chunk.partition("\n")
      runs[name.removesuffix(".py")] = printed
    found.append(runs)
  return found


def rewritten(source: pathlib.Path, workdir: pathlib.Path,
              variant: str) -> pathlib.Path:
  """What `python -m compare.rewrite` writes of `source` (`variant`: "first
  step" or "--global"), as a file in `workdir`."""
  target = workdir / f"{source.stem}_{variant.strip('-').replace(' ', '_')}.py"
  flags = ["--global"] if variant == "--global" else []
  subprocess.run([sys.executable, "-m", "compare.rewrite", str(source),
                  "-o", str(target), *flags], cwd=ROOT, check=True,
                 capture_output=True)
  return target


def rewrite(program: str, workdir: pathlib.Path) -> dict[str, pathlib.Path]:
  """The original and its two ports (and the planted first step), as
  files in `workdir`."""
  source = INPUTS / f"{program}.py"
  paths = {"original": source}
  for variant in ("first step", "--global"):
    paths[variant] = rewritten(source, workdir, variant)
  text = paths["first step"].read_text()
  assert GLOBAL_DEVICES in text, "the first step's mesh is not the one known"
  plant = workdir / f"{program}_plant.py"
  plant.write_text(text.replace(GLOBAL_DEVICES, LOCAL_DEVICES))
  paths["plant: local mesh"] = plant
  text = paths["--global"].read_text()
  assert GLOBAL_MESH in text and "_pmap_" not in text, (
      "--global's mesh is not the one known")
  plant = workdir / f"{program}_plant_global.py"
  plant.write_text(text.replace(GLOBAL_MESH, LOCAL_MESH))
  paths["plant: --global local mesh"] = plant
  return paths


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--processes", type=int, default=2)
  parser.add_argument("--devices", type=int, default=4)
  args = parser.parse_args(argv)
  layouts = ((args.processes, args.devices), (1, args.processes * args.devices))
  print(f"{'program':<20} {'layout':<8} {'run':<18} every line equal")
  wrong = 0
  with tempfile.TemporaryDirectory() as workdir:
    for program in PROGRAMS:
      paths = rewrite(program, pathlib.Path(workdir))
      for processes, devices in layouts:
        original = run_job(paths["original"], processes, devices)
        for variant, path in paths.items():
          if variant == "original":
            continue
          try:
            equal = run_job(path, processes, devices) == original
          except JobError as err:
            equal = f"failed: {str(err).splitlines()[-1]}"
          planted = variant.startswith("plant")
          wrong += (equal is not True) != (planted and processes > 1)
          print(f"{program:<20} {processes}x{devices:<6} {variant:<18} "
                f"{equal}")
  return 1 if wrong else 0


if __name__ == "__main__":
  sys.exit(main())
