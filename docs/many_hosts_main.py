"""A team's many-host training `main`, end to end (docs/MANY-HOSTS.md).

The guide's recipes for many hosts, each said once in the migration guide
(docs/MIGRATION.md, section 5) and shown from here:

- region `many-hosts-place`: one `Auto` mesh over every process's devices,
  and a host's own rows of the global batch placed with
  `jax.make_array_from_process_local_data` (not `jax.device_put`, which
  asserts that every process passed the same value);
- region `many-hosts-checkpoint`: the whole state, parameters and optimizer
  state, saved as global arrays with Orbax by every process, and restored
  onto its own shardings to resume;
- region `many-hosts-main`: join the job (`jax.distributed.initialize`, gloo
  for CPU collectives), the state placed once, resumed where a checkpoint
  exists, the step `jit(shard_map(...))` as on one host, printing from
  process 0, a checkpoint every `save_every` steps and at the last.

    python -m docs.many_hosts_main --workdir W     # one process
    # two processes of 4 emulated devices each (as tests/test_many_hosts.py):
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -m \
      docs.many_hosts_main --workdir W --coordinator 127.0.0.1:PORT \
      --num-processes 2 --process-id I [--steps N] [--show-batch]

`tests/test_many_hosts.py` runs it in one process of 8 devices and in two
of 4: the same losses; each process's rows differ and the global batch is
their concatenation (`--show-batch`); a job stopped after step 3's
checkpoint and started again ends with the uninterrupted job's state digest.
"""

import argparse
import hashlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ROWS, FEATURES = 64, 16


def data(step):
  """Global batch `step` (x, y): what every process's rows are cut from."""
  rng = np.random.default_rng(step)
  x = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
  return x, (x @ np.arange(FEATURES, dtype=np.float32)[:, None]) / FEATURES


def host_batch(step):
  """This process's rows of global batch `step`: all a host's loader reads."""
  per = ROWS // jax.process_count()
  mine = slice(jax.process_index() * per, (jax.process_index() + 1) * per)
  return tuple(a[mine] for a in data(step))


# region: many-hosts-place
def global_mesh():  # every process's devices; Auto
  # In make_mesh's order: by physical topology (its docstring's TPU v3 ring
  # is [0, 1, 2, 3, 6, 7, 4, 5]), not by process, so the global batch's row
  # order is the mesh's. Where it must be the processes' rows in process
  # order (a pmap run matched row for row), build
  # Mesh(sorted(jax.devices(), key=lambda d: d.process_index), ...).
  return jax.make_mesh((jax.device_count(),), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))


def place_batch(mesh, host_rows):  # rows that differ by host: global arrays
  return jax.tree.map(lambda rows: jax.make_array_from_process_local_data(
      NamedSharding(mesh, P("data")), rows), host_rows)
# endregion


# region: many-hosts-checkpoint
def save(manager, step, state):  # all of it: params AND optimizer state,
  manager.save(step, args=ocp.args.StandardSave(state))  # global arrays


def resume(manager, state):  # the newest checkpoint, if any, restored
  step = manager.latest_step()  # onto `state`'s own shapes and shardings
  if step is None:
    return 0, state
  like = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
  return step, manager.restore(step, args=ocp.args.StandardRestore(like))
# endregion


# region: many-hosts-main
def main(workdir, coordinator=None, num_processes=1, process_id=0, steps=5,
         save_every=3):
  if num_processes > 1:  # every host runs this same main
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id)
  mesh, tx = global_mesh(), optax.adam(1e-2)
  params = {"w": np.zeros((FEATURES, 1), np.float32)}
  # The same value in every process: device_put asserts that it is (which
  # is why a host's own batch goes through place_batch instead).
  state = jax.device_put((params, tx.init(params)), NamedSharding(mesh, P()))
  manager = ocp.CheckpointManager(workdir)  # every process, alike
  start, state = resume(manager, state)

  def body(state, x, y):  # one device's rows, as pmap's step saw them
    params, opt_state = state
    loss, grads = jax.value_and_grad(
        lambda p: jnp.mean((x @ p["w"] - y) ** 2))(params)
    grads, loss = jax.lax.pmean((grads, loss), "data")
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  step = jax.jit(jax.shard_map(body, mesh=mesh,
                               in_specs=(P(), P("data"), P("data")),
                               out_specs=(P(), P()), check_vma=False),
                 donate_argnums=0)
  for i in range(start, steps):
    state, loss = step(state, *place_batch(mesh, host_batch(i)))
    if jax.process_index() == 0:  # a replicated value: any process reads it
      print(f"step {i + 1} loss {float(loss)!r}", flush=True)
    if (i + 1) % save_every == 0 or i + 1 == steps:
      save(manager, i + 1, state)
  manager.wait_until_finished()
  return state
# endregion


def digest(tree):
  """sha256 of a tree's leaves' bytes (replicated arrays: any process's)."""
  sha = hashlib.sha256()
  for leaf in jax.tree.leaves(tree):
    sha.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
  return sha.hexdigest()


def show_batch(step=0):
  """Prints each process's rows of batch `step` and the global batch that
  `place_batch` assembles from them (gathered: it spans every process)."""
  rows = host_batch(step)
  placed = place_batch(global_mesh(), rows)
  print(f"rows {jax.process_index()} {digest(rows)}", flush=True)
  whole = multihost_utils.process_allgather(placed, tiled=True)
  if jax.process_index() == 0:
    print(f"batch {digest(whole)}", flush=True)


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--coordinator")
  parser.add_argument("--num-processes", type=int, default=1)
  parser.add_argument("--process-id", type=int, default=0)
  parser.add_argument("--steps", type=int, default=5)
  parser.add_argument("--show-batch", action="store_true")
  args = parser.parse_args()
  final = main(args.workdir, args.coordinator, args.num_processes,
               args.process_id, args.steps)
  if args.show_batch:
    show_batch()
  if jax.process_index() == 0:
    print(f"digest {digest(final)}", flush=True)
  sys.exit(0)
