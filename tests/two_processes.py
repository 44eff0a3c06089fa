"""A program's own 2-process job (2 x 4 emulated devices, gloo), for tests.

The programs the guide shows for many hosts take `--coordinator`,
`--num-processes` and `--process-id` themselves (docs/many_hosts_main.py,
docs/trainstate_port.py); this starts both processes on localhost and
returns what each printed, never leaving one behind.
"""

import os
import pathlib
import socket
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def two_processes(module, logs, name, *args, timeout=180):
  """Runs `python -m module ARGS` as processes 0 and 1 of one job.

  Args:
    module: The program, which joins the job from the three flags.
    logs: A folder for each process's stderr (`NAME.I.err`).
    name: Names the job's logs.
    *args: The program's other flags.
    timeout: Seconds each process may take.

  Returns:
    Each process's printed lines; AssertionError with each one's last
    errors if either exits other than 0.
  """
  with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
  errors = [pathlib.Path(logs) / f"{name}.{i}.err" for i in range(2)]
  workers = []
  for i, error in enumerate(errors):
    with open(error, "w", encoding="utf-8") as stderr:
      workers.append(subprocess.Popen(
          [sys.executable, "-m", module, *map(str, args), "--coordinator",
           f"127.0.0.1:{port}", "--num-processes", "2", "--process-id",
           str(i)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
          stderr=stderr, text=True))
  try:
    outs = [w.communicate(timeout=timeout)[0].splitlines() for w in workers]
  finally:  # a process left waiting in a collective for its lost peer
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
        worker.wait()
  codes = [w.returncode for w in workers]
  assert codes == [0, 0], (codes, [  # each process's last errors, cut short
      [line[:300] for line in e.read_text().splitlines()
       if "Error" in line][-2:] for e in errors])
  return outs
