"""The error-index case that needs two processes: fetching an array that
spans another process's devices (`docs.errors` lists it with the others).
"""

import builtins
import json
import pathlib
import subprocess
import sys

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ROOT = pathlib.Path(__file__).resolve().parents[1]


def fetch_worker(port: int, process_id: int) -> None:
  """One of `fetch_across_processes`' 2 processes (2 devices each): prints
  what fetching the 4-device array raises, as JSON."""
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                             num_processes=2, process_id=process_id,
                             initialization_timeout=60)
  mesh = jax.make_mesh((jax.device_count(),), ("data",))
  whole = np.arange(2 * jax.device_count(), dtype=np.float32)
  x = jax.make_array_from_callback(whole.shape, NamedSharding(mesh, P("data")),
                                   lambda index: whole[index])
  try:
    jax.device_get(x)
  except Exception as err:  # pylint: disable=broad-except
    print(json.dumps({"type": type(err).__name__, "message": str(err)}),
          flush=True)


def fetch_across_processes():
  """`jax.device_get` of an array over 2 processes' devices: both processes
  really run (jax.distributed on localhost); process 0's error, raised here."""
  from shardport.launch import launcher  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  port = launcher.free_port()
  env = {**launcher.worker_env(2, 4), "PYTHONPATH": str(ROOT)}
  workers = [subprocess.Popen(  # pylint: disable=consider-using-with
      [sys.executable, "-c", "from docs import errors_processes; "
       f"errors_processes.fetch_worker({port}, {i})"], cwd=ROOT, env=env,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
  try:
    outputs = [worker.communicate(timeout=120) for worker in workers]
  finally:
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
        worker.wait()
  stdout, stderr = outputs[0]
  found = [line for line in stdout.splitlines() if line.startswith("{")]
  if not found and workers[0].returncode == 0:
    return  # it fetched: no error
  if not found:
    raise ChildProcessError(
        f"process 0 of 2 exited with {workers[0].returncode}: "
        + " | ".join(stderr.strip().splitlines()[-3:]))
  raised = json.loads(found[-1])
  kind = getattr(builtins, raised["type"], None)
  if not (isinstance(kind, type) and issubclass(kind, Exception)):
    kind = type(raised["type"], (Exception,), {})  # keeps JAX's type's name
  raise kind(raised["message"])
