"""A flax Linen team program whose port builds its own optimiser: an MLP
with LayerNorm, `optax.chain(clip_by_global_norm(1.0), adamw(schedule))`,
weight decay on the kernels only, pmapped in the new style (the state
broadcast: `in_axes=(None, 0)`, `out_axes=(None, 0)`).

The port's module builds its own `TrainState` from the same params, its tx
from its own config (warm-up given in examples, the decay mask by name):
given to the harness as `port_init`, so its optimiser is what is proved.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util
from flax.training import train_state
from jax.sharding import Mesh, PartitionSpec as P

GLOBAL_BATCH, DEVICES = 64, 8
WARMUP_EXAMPLES = 256  # the config: warm-up over 256 examples
PEAK_LR, WEIGHT_DECAY = 3e-3, 0.05


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.LayerNorm()(nn.Dense(64)(x))
    return nn.Dense(10)(nn.gelu(x))


def init_params(seed=0):
  return MLP().init(jax.random.PRNGKey(seed), jnp.ones((1, 24)))["params"]


def schedule(warmup_steps, steps):
  # A small initial rate: step 1's update is not zero.
  return optax.warmup_cosine_decay_schedule(
      PEAK_LR / 10, PEAK_LR, warmup_steps, max(steps, warmup_steps + 1))


def create_state(steps=10, seed=0):
  """The pmap program's state: decay on the kernels (ndim > 1) only."""
  tx = optax.chain(
      optax.clip_by_global_norm(1.0),
      optax.adamw(schedule(WARMUP_EXAMPLES // GLOBAL_BATCH, steps),
                  weight_decay=WEIGHT_DECAY,
                  mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p)))
  return train_state.TrainState.create(
      apply_fn=MLP().apply, params=init_params(seed), tx=tx)


def batches(rows=GLOBAL_BATCH):
  def batch(i):
    r = np.random.default_rng(500 + i)
    x = r.normal(size=(rows, 24)).astype(np.float32)
    return {"x": x, "y": (x[:, :10] + x[:, 10:20]).argmax(1).astype(np.int32)}
  return batch


def train_step(state, batch):
  def loss_fn(params):
    logits = state.apply_fn({"params": params}, batch["x"])
    loss = optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["y"]).mean()
    return loss, logits
  (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  grads = jax.lax.pmean(grads, "batch")
  state = state.apply_gradients(grads=grads)
  accuracy = jnp.mean(jnp.argmax(logits, -1) == batch["y"])
  return state, {"loss": jax.lax.pmean(loss, "batch"),
                 "accuracy": jax.lax.pmean(accuracy, "batch")}


p_train_step = jax.pmap(train_step, axis_name="batch", in_axes=(None, 0),
                        out_axes=(None, 0))


# The port's module: its own state, built from its own config.


def _decay_mask(params):
  """Decay the kernels, by name."""
  flat = traverse_util.flatten_dict(params)
  return traverse_util.unflatten_dict(
      {k: k[-1] == "kernel" for k in flat})


def _decay_mask_no_bias(params):
  """"No decay on biases", by name: LayerNorm's scale is decayed too."""
  flat = traverse_util.flatten_dict(params)
  return traverse_util.unflatten_dict({k: k[-1] != "bias" for k in flat})


def create_port_state(steps=10, seed=0, warmup_rows=GLOBAL_BATCH,
                      mask=_decay_mask):
  """The port's `TrainState`: the same params, its own tx; `warmup_rows`
  the rows a warm-up step counts."""
  warmup_steps = WARMUP_EXAMPLES // warmup_rows
  tx = optax.chain(
      optax.clip_by_global_norm(1.0),
      optax.adamw(schedule(warmup_steps, steps), weight_decay=WEIGHT_DECAY,
                  mask=mask))
  return train_state.TrainState.create(
      apply_fn=MLP().apply, params=init_params(seed), tx=tx)


def make_mesh(n=DEVICES):
  return Mesh(np.array(jax.devices()[:n]), ("batch",))


def make_port_step(mesh):
  # check_vma=False: grad returns each device's own gradient, as under
  # pmap, so train_step's pmean is right.
  return jax.jit(jax.shard_map(train_step, mesh=mesh,
                               in_specs=(P(), P("batch")),
                               out_specs=(P(), P()), check_vma=False))


def warmup_per_device(steps):
  """Wrong: the warm-up's steps counted in per-device batches (8 rows, the
  batch size a shard_map body sees): 32 warm-up steps where pmap has 4."""
  return create_port_state(steps, warmup_rows=GLOBAL_BATCH // DEVICES)


def decay_by_name(steps):
  """Wrong: the decay mask "everything but biases": LayerNorm's scale is
  decayed, which pmap's mask (ndim > 1) leaves alone."""
  return create_port_state(steps, mask=_decay_mask_no_bias)


WRONG = ("warmup_per_device", "decay_by_name")


def port(wrong=None, steps=10):
  """The program and its port (`wrong`: one of `WRONG`) as a compare.Port,
  the port on its own state (`port_init`)."""
  import compare  # pylint: disable=g-import-not-at-top
  mesh = make_mesh()
  make = create_port_state if wrong is None else globals()[wrong]
  return compare.Port(
      name="own_optimizer", init=lambda: create_state(steps),
      pmap_step=p_train_step, port_step=make_port_step(mesh), mesh=mesh,
      batches=batches(), steps=steps, port_init=lambda: make(steps))
