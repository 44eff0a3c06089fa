"""Wrong twins of the guide's TrainState port, and the job that runs them.

Each plant swaps one body of `docs.trainstate_port` for a mistake teams
make when porting, only in the port (pmap's steps were built at import):
the dropout key not folded with the device's index, the eval's padding
rows counted, the eval's sums not summed over the devices (and hosts), and
a mesh whose devices are not in process order (which one process cannot
see: it fails in 2 processes only). `docs.trainstate_port.check` must fail
on each, at the part named.

    python -m tests.trainstate_plants [the flags of docs.trainstate_port]

runs `check` and then every plant in this process (or job), printing
`bitwise LEAVES` and one `plant NAME fails at PART` line per plant, or
`plant NAME passes` where a plant went unnoticed. With `--pmap-checkpoint
PATH` (a checkpoint `docs.pmap_checkpoint.pmap_program` wrote) it then
restores it into the port through `compare.from_pmap_checkpoint` and
prints `pmap checkpoint SHA256` of every bit of the restored state.
"""

import argparse
import hashlib
import sys
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType
from jax.sharding import Mesh

from docs import pmap_checkpoint
from docs import trainstate_port as program

# The right bodies, which the plants wrap while they stand in for them.
_TRAIN, _EVAL = program.train_step, program.eval_sums


def _key_not_folded(state, batch, axis):
  # Tracing under the patch: every device's key is device 0's.
  with mock.patch.object(jax.lax, "axis_index", lambda _: 0):
    return _TRAIN(state, batch, axis)


def _mask_dropped(state, batch, axis):
  return _EVAL(
      state, {**batch, "mask": jnp.ones_like(batch["mask"])}, axis)


def _psum_dropped(state, batch, axis):
  # out_specs=P() then returns device 0's own sums, unchecked.
  with mock.patch.object(jax.lax, "psum", lambda x, _: x):
    return _EVAL(state, batch, axis)


def _mesh_not_in_process_order():
  # As jax.make_mesh may order them (by topology): here process 1's devices
  # first. One process: the same program. Two: each host's rows land on the
  # other's mesh positions, and draw the other's dropout keys.
  devices = sorted(jax.devices(), key=lambda d: (-d.process_index, d.id))
  return Mesh(np.array(devices), ("data",), axis_types=(AxisType.Auto,))


# name: (what it replaces, the mistake, the part check must fail at)
PLANTS = {"key-not-folded": ("train_step", _key_not_folded, "state"),
          "mask-dropped": ("eval_sums", _mask_dropped, "eval metrics"),
          "psum-dropped": ("eval_sums", _psum_dropped, "eval metrics"),
          "mesh-not-in-process-order": (
              "process_mesh", _mesh_not_in_process_order, "state")}


def planted(name):
  """A context in which the port runs with plant `name`."""
  body, mistake, _ = PLANTS[name]
  return mock.patch.object(program, body, mistake)


def restored_digest(path, mesh):
  """The sha256 of a pmap program's checkpoint restored into its port.

  Args:
    path: What `docs.pmap_checkpoint.pmap_program` saved (stacked copies,
      a raw `uint32[2]` key, `optax.MultiSteps` mid-accumulation).
    mesh: The port's mesh, over every process's devices.

  Returns:
    The hex digest of every leaf's bits (a typed key's data), the same on
    every process and in a job of one process when the restore is right;
    AssertionError if the copies one process holds differ.
  """
  state = pmap_checkpoint.restore_in_port(path, mesh)
  assert jax.dtypes.issubdtype(state.rng.dtype, jax.dtypes.prng_key)
  digest = hashlib.sha256()
  for copies in program.host_bits(state):  # replicated: each is the whole
    assert all(np.array_equal(copies[0], c) for c in copies[1:])
    digest.update(f"{copies[0].dtype}{copies[0].shape}".encode())
    digest.update(copies[0].tobytes())
  return digest.hexdigest()


def main(argv=None):
  """Joins the job, runs `check` and then each plant, one line each.

  Args:
    argv: docs.trainstate_port's flags (`--workdir`, and for a job of many
      processes `--coordinator`, `--num-processes`, `--process-id`), and
      `--pmap-checkpoint PATH`.

  Returns:
    0; a plant that passes is printed, for the caller to judge.
  """
  parser = argparse.ArgumentParser(add_help=False)
  parser.add_argument("--pmap-checkpoint")
  ours, argv = parser.parse_known_args(argv)
  workdir = program.join(argv, __doc__.splitlines()[0])
  leaves, _ = program.check(workdir=f"{workdir}/port")
  print(f"bitwise {leaves}", flush=True)
  for name in PLANTS:
    try:
      with planted(name):
        program.check(workdir=f"{workdir}/{name}")
      print(f"plant {name} passes", flush=True)
    except AssertionError as error:
      print(f"plant {name} fails at {error.args[0][0]}", flush=True)
  if ours.pmap_checkpoint:
    digest = restored_digest(ours.pmap_checkpoint, program.process_mesh())
    print(f"pmap checkpoint {digest}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
