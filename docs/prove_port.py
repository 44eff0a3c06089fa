"""How to prove a port of your own: the first-step check, runnable and tested.

A tiny model's pmap step, its shard_map port and a one-device reference take
one step from the same state on the same batch; `compare._src.prove.equivalence` judges
every pair. `tests/test_guide.py` runs it with a right port and with the
gradient-trap port (which must be caught), and shows why Adam needs the
gradient, not the params, compared. docs/APPENDIX.md links `first_step` and
`verdicts`.
"""

import flax.jax_utils
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from compare._src.prove import equivalence
from shardport.strategies import tolerances


def loss(params, batch):
  """Summed over the device's examples, as the classic program does."""
  x, y = batch
  return jnp.sum((x @ params["w"] + params["b"] - y) ** 2)


def _step(tx, axis):
  def step(params, opt_state, batch):
    grads = lax.pmean(jax.grad(loss)(params, batch), axis)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, grads
  return step


def make_steps(n_devices, tx, check_vma=False):
  """The pmap step, its shard_map port and the one-device reference."""
  devices = jax.local_devices()[:n_devices]
  mesh = jax.make_mesh((n_devices,), ("data",), axis_types=(AxisType.Auto,),
                       devices=devices)
  pmap_step = jax.pmap(_step(tx, "batch"), axis_name="batch", devices=devices)
  port_step = jax.jit(jax.shard_map(
      _step(tx, "data"), mesh=mesh, in_specs=(P(), P(), P("data")),
      out_specs=P(), check_vma=check_vma))

  def reference_step(params, opt_state, batch):
    # The same loss semantics on the whole batch: sum / n_devices.
    grads = jax.grad(lambda p: loss(p, batch) / n_devices)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, grads

  return mesh, pmap_step, port_step, jax.jit(reference_step)


def first_step(params, host_batch, n_devices, tx, check_vma=False):
  """One step of each run from the same state and batch, fetched to host."""
  mesh, pmap_step, port_step, reference_step = make_steps(n_devices, tx,
                                                          check_vma)
  opt_state = tx.init(params)
  devices = jax.local_devices()[:n_devices]
  split = lambda a: a.reshape(n_devices, -1, *a.shape[1:])
  legacy = pmap_step(flax.jax_utils.replicate(params, devices),
                     flax.jax_utils.replicate(opt_state, devices),
                     jax.tree.map(split, host_batch))
  replicated = NamedSharding(mesh, P())
  port = port_step(jax.device_put(params, replicated),
                   jax.device_put(opt_state, replicated),
                   jax.device_put(host_batch, NamedSharding(mesh, P("data"))))
  reference = reference_step(params, opt_state, host_batch)
  fetch = lambda out: dict(zip(("params", "opt_state", "grads"), out))
  return {"pmap": jax.tree.map(lambda x: x[0], jax.device_get(fetch(legacy))),
          "port": jax.device_get(fetch(port)),
          "reference": jax.device_get(fetch(reference))}


def verdicts(runs, what="params", tol=tolerances.Tolerance(1e-5, 1e-5)):
  """`bitwise`, `close` or `differ` for each pair; the second side is truth."""
  return {f"{a} vs {b}": equivalence.compare_trees(runs[a][what],
                                                   runs[b][what], tol)
          for a, b in (("port", "pmap"), ("port", "reference"),
                       ("pmap", "reference"))}


def example(check_vma=False, tx=None, n_devices=8, seed=0):
  """The first step of a linear model on `n_devices`, all pairs judged."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(64, 3)).astype(np.float32)
  y = rng.normal(size=(64,)).astype(np.float32)
  params = {"w": rng.normal(size=3).astype(np.float32),
            "b": np.zeros((), np.float32)}
  return first_step(params, (x, y), n_devices, tx or optax.sgd(0.01),
                    check_vma)
