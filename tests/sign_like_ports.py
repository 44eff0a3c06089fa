"""A team program under an optimiser whose first update is sign-like, with a
`reference_step` written as examples/resnet/prove.py writes it (issue 57).

A flax Linen MLP on random data, trained by AdamW, Adafactor or Lion: a pmap
step with the gradients pmean'd, its `jit(shard_map)` port, and pmap's step
under `vmap(axis_name=...)` on one device as the ground truth. The first
update of each is about `lr * sign(g)`, so a gradient element within
rounding of zero moves its parameter by a whole step either way: pmap and
the one-device reference, which sum in other orders, part there by a
rounding flip. `python -m compare --program tests.sign_like_ports:port`
proves it (`...:lion_own_outputs`: the second loss below, under Lion).

Two losses: `"labels"`, softmax cross-entropy on a random teacher's labels,
where AdamW flips at step 1 (its `eps` makes every gradient within about
`eps` of zero sensitive; Lion's and Adafactor's exact signs flip far more
rarely: none in 4.3M parameters); and `"own_outputs"`, squared error to
the initial model's own outputs computed on the host (half the outputs;
random targets the rest), whose gradient there is rounding alone at step
1 only, so every optimiser flips there.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax import lax
from jax.sharding import PartitionSpec as P

import compare

# 285k parameters: enough gradient elements within rounding of zero that
# AdamW's first step flips under "labels" (82.5x the band at step 1, 49x to
# 218x over five seeds; at 128 or 256 wide none did), small enough for a
# proof in seconds.
FEATURES, HIDDEN, CLASSES, ROWS = 32, 512, 10, 128
OPTIMIZERS = {
    "adamw": lambda: optax.adamw(1e-3, weight_decay=1e-4),
    "adafactor": lambda: optax.adafactor(1e-2),
    "lion": lambda: optax.lion(1e-4, weight_decay=1e-4),
}


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(HIDDEN)(x))
    x = nn.relu(nn.Dense(HIDDEN)(x))
    return nn.Dense(CLASSES)(x)


def create_state(optimizer="adamw"):
  model = MLP()
  params = model.init(jax.random.PRNGKey(0),
                      jnp.ones((1, FEATURES)))["params"]
  return train_state.TrainState.create(
      apply_fn=model.apply, params=params, tx=OPTIMIZERS[optimizer]())


def train_step(state, batch):
  """One step on this device's rows: cross-entropy on `batch["y"]`, or
  squared error to `batch["t"]`."""
  def loss_fn(params):
    out = state.apply_fn({"params": params}, batch["x"])
    if "t" in batch:
      return jnp.mean((out - batch["t"]) ** 2)
    return optax.softmax_cross_entropy_with_integer_labels(
        out, batch["y"]).mean()

  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  grads = lax.pmean(grads, "batch")
  return state.apply_gradients(grads=grads), {
      "loss": lax.pmean(loss, "batch")}


def _outputs(params, x):
  """The model's outputs in float64 on the host: another rounding than any
  run's float32 forward pass."""
  for name in ("Dense_0", "Dense_1"):
    x = np.maximum(x @ params[name]["kernel"] + params[name]["bias"], 0.0)
  return x @ params["Dense_2"]["kernel"] + params["Dense_2"]["bias"]


def batches(loss="labels", rows=ROWS):
  """`step -> batch`: random features, with a random teacher's labels
  (`"labels"`) or the initial model's own outputs as targets for half the
  outputs, random ones for the rest (`"own_outputs"`)."""
  teacher = np.random.default_rng(99).normal(size=(FEATURES, CLASSES))
  initial = None if loss == "labels" else jax.device_get(
      create_state().params)

  def batch(i):
    x = np.random.default_rng(i).normal(size=(rows, FEATURES))
    if loss == "labels":
      return {"x": x.astype(np.float32),
              "y": np.argmax(x @ teacher, -1).astype(np.int32)}
    t = _outputs(initial, x)
    t[:, CLASSES // 2:] += np.random.default_rng(i + 7).normal(
        size=(rows, CLASSES - CLASSES // 2))
    return {"x": x.astype(np.float32), "t": t.astype(np.float32)}

  return batch


def reference_step(n_devices):
  """pmap's step on one device, as examples/resnet/prove.py writes it."""
  per_device = jax.vmap(train_step, in_axes=(None, 0), axis_name="batch")

  def step(state, batch):
    state, metrics = per_device(state, compare.split_batch(batch, n_devices))
    return jax.tree.map(lambda x: x[0], (state, metrics))
  return jax.jit(step)


def make_port_step(mesh):
  # check_vma=False: grad returns each device's own gradient, as under pmap.
  return jax.jit(jax.shard_map(train_step, mesh=mesh,
                               in_specs=(P(), P("batch")),
                               out_specs=(P(), P()), check_vma=False))


def port(optimizer="adamw", steps=4, loss="labels"):
  """The program, its port and the reference, as a `compare.Port`."""
  mesh = jax.make_mesh((8,), ("batch",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  return compare.Port(
      name=f"mlp_{optimizer}_{loss}", init=functools.partial(
          create_state, optimizer),
      pmap_step=jax.pmap(train_step, axis_name="batch"),
      port_step=make_port_step(mesh), mesh=mesh, batches=batches(loss),
      steps=steps, reference_step=reference_step(mesh.size))


def lion_own_outputs():
  return port("lion", loss="own_outputs")


def main() -> int:
  """Every optimiser under both losses at 4, 10 and 50 steps, proved
  (issue 57: `python -m tests.sign_like_ports`; 18 proofs, minutes): a
  line each; exit 1 where any fails."""
  worst = 0
  for optimizer in OPTIMIZERS:
    for loss in ("labels", "own_outputs"):
      for steps in (4, 10, 50):
        proof = compare.prove(port(optimizer, steps, loss), windows=0)
        worst = max(worst, proof.exit_code)
        print(f"{optimizer:<10} {loss:<12} {steps:>3}  {proof.verdict:<5} "
              "rounding flips of the calibration at "
              f"{proof.report['lockstep']['band_flip_steps']} "
              f"{proof.first_failure or ''}", flush=True)
  return worst


if __name__ == "__main__":
  jax.config.update("jax_num_cpu_devices", 8)
  raise SystemExit(main())
