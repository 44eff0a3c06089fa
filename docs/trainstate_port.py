"""A whole flax Linen `TrainState` program under pmap, and its port.

docs/TRAINSTATE-PORT.md shows the regions below as one block; the guide's
sections that teach each piece (docs/MIGRATION.md) link to it. The
program: BatchNorm averaged over the devices, a dropout mask per example
from a key folded with the step and the device, `optax.MultiSteps`
accumulating two steps, an eval over a ragged set whose padding rows are
masked and whose sums are summed over every device of every host, each
host reading only its own rows, and (the port) the whole state saved and
restored with Orbax. `check` runs both from one state on the same batches
and compares every bit of every state leaf and metric on this process.

    python -m docs.trainstate_port                   # 1 process x 8 devices
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -m \
      docs.trainstate_port --coordinator 127.0.0.1:PORT --num-processes 2 \
      --process-id I                                 # each of 2 processes

tests/test_snippets.py runs it in 1 process x 8 devices (the page's block,
as pasted); tests/test_trainstate_port.py in 2 x 4 under gloo, with its
wrong twins (tests/trainstate_plants.py). XLA:CPU, jax 0.10.2.
"""

import argparse
import functools
import os
import sys
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

# The page's imports (docs/page_imports.py, region trainstate-imports),
# after which its block runs pasted.
# pylint: disable=g-import-not-at-top,wrong-import-position
import flax.jax_utils
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax.training import common_utils
from flax.training import train_state
from jax import lax
from jax.sharding import AxisType
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


# region: trainstate-shared
FEATURES, CLASSES, ROWS = 6, 3, 32  # ROWS: one global training batch
EVAL_ROWS, EVAL_BATCH = 37, 16  # a ragged eval set: 3 batches, 11 rows pad

class Net(nn.Module):  # built with the axis BatchNorm averages over
  axis_name: str | None = None
  @nn.compact
  def __call__(self, x, train):
    x = nn.Dense(16)(x)
    x = nn.BatchNorm(use_running_average=not train, momentum=0.9,
                     axis_name=self.axis_name)(x)
    x = nn.Dropout(0.25, deterministic=not train)(nn.relu(x))  # per row
    return nn.Dense(CLASSES)(x)

class State(train_state.TrainState):
  batch_stats: dict
  key: jax.Array  # typed (jax.random.key); folded per step and device

# Built once: a state's tx is static, and each new one makes jit compile
# the step again. MultiSteps applies the mean of every 2 steps' gradients.
TX = optax.MultiSteps(optax.sgd(0.1, momentum=0.9), every_k_schedule=2)

@jax.jit  # eagerly, init would compile each of its ops on its own
def init_variables(key):
  return Net().init(key, jnp.ones((1, FEATURES)), False)

def create_state(seed=0):  # one host copy, numpy leaves
  variables = init_variables(jax.random.key(seed))
  state = State.create(apply_fn=None, params=variables["params"], tx=TX,
                       batch_stats=variables["batch_stats"],
                       key=jax.random.key(seed + 1))
  # step: int32, not create's Python 0 (weakly typed): Orbax restores an
  # int32, and a step fed both kinds compiles twice.
  return jax.device_get(state.replace(step=np.int32(0)))

def train_step(state, batch, axis):  # one device's rows: pmap's body, and
  key = jax.random.fold_in(  # the port's with the mesh's axis name
      jax.random.fold_in(state.key, state.step), lax.axis_index(axis))
  def loss_fn(params):
    logits, new = Net(axis).apply(
        {"params": params, "batch_stats": state.batch_stats}, batch["x"],
        True, rngs={"dropout": key}, mutable=["batch_stats"])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean(), new["batch_stats"]
  (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  grads, loss = lax.pmean((grads, loss), axis)  # equal rows per device
  return state.apply_gradients(grads=grads, batch_stats=stats), {"loss": loss}

def eval_sums(state, batch, axis):  # sums over the real rows of every host
  logits = Net(axis).apply(
      {"params": state.params, "batch_stats": state.batch_stats},
      batch["x"], False)
  losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])
  right = (jnp.argmax(logits, -1) == batch["y"]).astype(jnp.float32)
  mask = batch["mask"]  # 0 on the padding rows
  return lax.psum({"loss": (losses * mask).sum(),
                   "correct": (right * mask).sum(), "count": mask.sum()}, axis)

def examples(rows, seed):  # random inputs, 3 classes
  x = np.random.default_rng(seed).normal(size=(rows, FEATURES))
  return x.astype(np.float32), (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 1)

def train_batch(step):  # global batch `step`: what every host cuts rows from
  x, y = examples(ROWS, step)
  return {"x": x, "y": y}

def eval_batches():  # the eval set in global batches, the last one padded
  x, y = examples(EVAL_ROWS, (0, 1))  # a seed no train_batch has
  pad = -EVAL_ROWS % EVAL_BATCH
  rows = {"x": np.concatenate([x, np.zeros((pad, FEATURES), np.float32)]),
          "y": np.concatenate([y, np.zeros(pad, np.int32)]),
          "mask": (np.arange(EVAL_ROWS + pad) < EVAL_ROWS).astype(np.float32)}
  return [jax.tree.map(lambda a: a[i:i + EVAL_BATCH], rows)
          for i in range(0, EVAL_ROWS + pad, EVAL_BATCH)]

def host_rows(batch):  # this process's rows of a global batch
  per = len(batch["x"]) // jax.process_count()
  start = jax.process_index() * per
  return jax.tree.map(lambda a: a[start:start + per], batch)

def totals(sums):  # the eval's sums over its batches, then the means
  total = jax.tree.map(lambda *s: np.sum(s), *sums)
  return {"loss": total["loss"] / total["count"],
          "accuracy": total["correct"] / total["count"]}
# endregion


# region: trainstate-pmap
p_train = jax.pmap(functools.partial(train_step, axis="batch"), "batch",
                   donate_argnums=0)
p_eval = jax.pmap(functools.partial(eval_sums, axis="batch"), "batch")

def run_pmap(state, steps):  # before: pmap over this host's devices
  state = flax.jax_utils.replicate(state, axis_name="batch")  # no recompile
  history = []
  for step in range(steps):
    batch = common_utils.shard(host_rows(train_batch(step)))  # [devices, ..]
    state, metrics = p_train(state, batch)
    history.append(metrics)
  history = common_utils.get_metrics(history)  # device 0's, over steps
  sums = [flax.jax_utils.unreplicate(p_eval(
      state, common_utils.shard(host_rows(batch))))
          for batch in eval_batches()]
  return state, history, totals(jax.device_get(sums))
# endregion


# region: trainstate-port
def process_mesh():  # every process's devices, in process order as pmap's
  devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
  return Mesh(np.array(devices), ("data",), axis_types=(AxisType.Auto,))

@functools.cache  # built once per mesh and body: a new one compiles again
def compiled(mesh, body, donate=False):  # per device, as pmap ran it
  return jax.jit(jax.shard_map(
      lambda s, b: body(s, b, "data"), mesh=mesh,
      in_specs=(P(), P("data")), out_specs=P(), check_vma=False),
                 donate_argnums=(0,) if donate else ())

def place(state, mesh):  # a host state, replicated over every process
  # A typed key is no numpy leaf: its host copy is an array on one device,
  # which device_put refuses to spread over other processes' devices.
  state = jax.device_put(state.replace(key=np.asarray(
      jax.random.key_data(state.key))), NamedSharding(mesh, P()))
  return state.replace(key=jax.random.wrap_key_data(state.key))

def run_port(state, steps, mesh, workdir, save_every=2):  # after
  p_train = compiled(mesh, train_step, donate=True)  # as pmap's, the state
  p_eval = compiled(mesh, eval_sums)
  rows = lambda batch: jax.make_array_from_process_local_data(
      NamedSharding(mesh, P("data")), host_rows(batch))
  state = place(state, mesh)  # once
  like = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
  history = []
  with ocp.CheckpointManager(workdir) as manager:  # every process, alike
    start = manager.latest_step() or 0  # a job started again resumes
    if start:
      state = manager.restore(start, args=ocp.args.StandardRestore(like))
    for step in range(start, steps):
      state, metrics = p_train(state, rows(train_batch(step)))
      history.append(metrics)
      if (step + 1) % save_every == 0 or step + 1 == steps:  # all of it:
        manager.save(step + 1, args=ocp.args.StandardSave(state))  # global
  history = common_utils.stack_forest(jax.device_get(history))
  sums = [p_eval(state, rows(batch)) for batch in eval_batches()]
  return state, history, totals(jax.device_get(sums))
# endregion


# region: trainstate-check
def host_bits(tree):  # every copy this process holds, keys as their data
  def bits(x):  # a typed key's uint32 data; numpy refuses the key itself
    return np.asarray(jax.random.key_data(x) if jnp.issubdtype(
        x.dtype, jax.dtypes.prng_key) else x)
  def copies(x):
    return [bits(s.data) for s in getattr(x, "addressable_shards", [])] or [
        bits(x)]
  return [copies(x) for x in jax.tree.leaves(tree)]

def check(steps=4, workdir=None, stop_at=3):
  """Both programs from one state, the port stopped after step `stop_at`
  and started again from its checkpoint: (state leaves compared, pmap's
  train and eval metrics). AssertionError: the first leaf that differs."""
  workdir = workdir or tempfile.mkdtemp()
  before = run_pmap(create_state(), steps)
  mesh = process_mesh()
  stopped = run_port(create_state(), stop_at, mesh, workdir)  # the job stops
  state, rest, evaluation = run_port(create_state(), steps, mesh, workdir)
  after = (state, jax.tree.map(lambda *h: np.concatenate(h), stopped[1],
                               rest), evaluation)  # the steps of both runs
  names = ["state", "train metrics", "eval metrics"]
  for name, old, new in zip(names, before, after):
    old, new = host_bits(old), host_bits(new)
    assert len(old) == len(new), (name, "leaves")
    for i, (pmap_copies, port_copies) in enumerate(zip(old, new)):
      for a in pmap_copies:  # pmap's copy on one device: [1, ...]
        for b in port_copies:  # the port's: the whole value
          assert a.size == b.size and np.array_equal(
              a.reshape(b.shape), b), (name, i, a, b)
  return len(jax.tree.leaves(before[0])), before[1:]
# endregion


def join(argv=None, description=__doc__.splitlines()[0]):
  """Parses the job's flags and joins it (gloo) when it has many processes.

  Returns:
    The checkpoint directory: `--workdir`, which every process must name
    alike, or a new temporary one in a job of one process.
  """
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--coordinator")
  parser.add_argument("--num-processes", type=int, default=1)
  parser.add_argument("--process-id", type=int, default=0)
  parser.add_argument("--workdir")
  args = parser.parse_args(argv)
  if args.num_processes > 1:
    if not (args.coordinator and args.workdir):
      parser.error("--num-processes > 1 needs --coordinator and a "
                   "--workdir that every process shares")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(args.coordinator, args.num_processes,
                               args.process_id)
  return args.workdir or tempfile.mkdtemp()


def main(argv=None):
  """Joins the job when asked, runs `check`, prints one line per process."""
  leaves, (history, evaluation) = check(workdir=join(argv))
  print(f"process {jax.process_index()} bitwise: {leaves} state leaves, "
        f"train loss {history['loss'].tolist()}, eval {evaluation}",
        flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
