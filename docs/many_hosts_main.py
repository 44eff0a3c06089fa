"""A team's many-host training `main`, end to end (docs/MANY-HOSTS.md).

Region `many-hosts-main`: join the job (`jax.distributed.initialize`, gloo
for CPU collectives), one mesh over every process's devices, the state
placed once (`P()`), each process's rows of every global batch assembled
into one global array (`jax.make_array_from_process_local_data`), the step
`jit(shard_map(...))` as on one host, printing from process 0 and an Orbax
checkpoint every process writes together.

    python -m docs.many_hosts_main --workdir W     # one process
    # two processes of 4 emulated devices each (as tests/test_more_idioms.py):
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -m \
      docs.many_hosts_main --workdir W --coordinator 127.0.0.1:PORT \
      --num-processes 2 --process-id I

`tests/test_more_idioms.py` runs it in one process of 8 devices and in two
of 4, and checks both print the same losses and write one checkpoint.
"""

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def data(step, rows=64, features=16):
  """Global batch `step`: every process can make it, and reads its rows."""
  rng = np.random.default_rng(step)
  x = rng.normal(size=(rows, features)).astype(np.float32)
  return x, (x @ np.arange(features, dtype=np.float32)[:, None]) / features


# region: many-hosts-main
def main(workdir, coordinator=None, num_processes=1, process_id=0, steps=5):
  if num_processes > 1:  # every host runs this same main
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id)
  mesh = jax.make_mesh((jax.device_count(),), ("data",))  # every process's
  replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  tx = optax.adam(1e-2)
  params = {"w": np.zeros((16, 1), np.float32)}  # the same in every process
  state = jax.tree.map(  # placed once; each process gives its own devices'
      lambda x: jax.make_array_from_process_local_data(replicated, x),
      (params, tx.init(params)))

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
  for i in range(steps):
    x, y = data(i)
    per = len(x) // jax.process_count()  # this process's rows only
    mine = slice(jax.process_index() * per, (jax.process_index() + 1) * per)
    x, y = (jax.make_array_from_process_local_data(rows, a[mine])
            for a in (x, y))
    state, loss = step(state, x, y)
    if jax.process_index() == 0:  # a replicated value: any process reads it
      print(f"step {i + 1} loss {float(loss)!r}", flush=True)
  checkpointer = ocp.StandardCheckpointer()  # every process calls it
  checkpointer.save(f"{workdir}/params", state[0])
  checkpointer.wait_until_finished()
# endregion


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--coordinator")
  parser.add_argument("--num-processes", type=int, default=1)
  parser.add_argument("--process-id", type=int, default=0)
  args = parser.parse_args()
  main(args.workdir, args.coordinator, args.num_processes, args.process_id)
  sys.exit(0)
