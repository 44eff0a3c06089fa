"""A `jax.example_libraries` team program: a stax MLP (Dense, Relu,
LogSoftmax) trained with `optimizers.momentum`, the step written as JAX's
mnist example writes it, `update(i, opt_state, batch) -> (opt_state,
loss)`, pmapped with an `axis_name` and the gradients pmean'd as JAX's spmd
example does: the step index broadcast (`in_axes=(None, 0, 0)`), the
optimiser state replicated with `jax.device_put_replicated`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.example_libraries import optimizers
from jax.example_libraries import stax
from jax.sharding import Mesh, PartitionSpec as P

init_random_params, predict = stax.serial(
    stax.Dense(32), stax.Relu, stax.Dense(10), stax.LogSoftmax)

opt_init, opt_update, get_params = optimizers.momentum(
    optimizers.exponential_decay(0.05, decay_steps=5, decay_rate=0.8),
    mass=0.9)


def loss(params, batch):
  inputs, targets = batch["x"], batch["y"]
  preds = predict(params, inputs)
  return -jnp.mean(jnp.sum(preds * jax.nn.one_hot(targets, 10), axis=1))


def create_opt_state(seed=0):
  _, params = init_random_params(jax.random.PRNGKey(seed), (-1, 16))
  return opt_init(params)


def batches(rows=64):
  def batch(i):
    r = np.random.default_rng(1000 + i)
    x = r.normal(size=(rows, 16)).astype(np.float32)
    return {"x": x, "y": (np.abs(x[:, :10]).argmax(1)).astype(np.int32)}
  return batch


def update_body(i, opt_state, batch, reduce=jax.lax.pmean,
                loss_reduce=jax.lax.pmean):
  params = get_params(opt_state)
  value, grads = jax.value_and_grad(loss)(params, batch)
  grads = reduce(grads, "batch")
  return opt_update(i, grads, opt_state), loss_reduce(value, "batch")


# The team's program: `for i in range(steps): opt_state, l = update(i,
# opt_state, shard(batch))`, opt_state from jax.device_put_replicated.
update = jax.pmap(update_body, axis_name="batch", in_axes=(None, 0, 0))


def make_mesh(n=8):
  return Mesh(np.array(jax.devices()[:n]), ("batch",))


def make_port_update(mesh, check_vma=False, **wrong):
  # check_vma=False: grad returns each device's own gradient, as under
  # pmap, so update_body's pmean is right.
  body = functools.partial(update_body, **wrong)
  return jax.jit(jax.shard_map(body, mesh=mesh,
                               in_specs=(P(), P(), P("batch")),
                               out_specs=(P(), P()), check_vma=check_vma))


def default_vma(mesh):
  """Wrong: shard_map's default check_vma=True: grad of the replicated
  params is already summed over the mesh, and the pmean leaves it 8x
  large (momentum's step is 8x too)."""
  return make_port_update(mesh, check_vma=True)


def local_loss(mesh):
  """Wrong: the loss not pmean'd ("shard_map's out_specs=P() gathers
  it"): with check_vma=False out_specs=P() reports the first device's
  loss, on its own 8 rows; the update is right."""
  return make_port_update(mesh, loss_reduce=lambda x, _: x)


WRONG = ("default_vma", "local_loss")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port."""
  import compare  # pylint: disable=g-import-not-at-top
  mesh = make_mesh(8)
  make = make_port_update if wrong is None else globals()[wrong]
  return compare.Port(
      name="stax_optimizers",
      init=lambda: (0, create_opt_state()),
      pmap_step=compare.adapt_step(update, step_index=True),
      port_step=compare.adapt_step(make(mesh), step_index=True),
      mesh=mesh, batches=batches(), steps=steps)
