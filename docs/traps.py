"""The migration's traps as minimal runnable examples, the wrong next to the right.

Every function returns an `Outcome`: what the pmap habit gives (`wrong`: a
value, or the exception it raises), what the fix gives (`right`), the ground
truth computed another way (`expected`) and the numbers worth reporting
(`facts`). `tests/test_traps.py` runs them all; `docs/MIGRATION.md` shows the
tagged regions (`docs/build_guide.py` pulls them). Needs 8 devices:
`python docs/traps.py` emulates them on CPU and prints what each trap shows.
"""

import dataclasses
import os
import sys
import time
from typing import Any

if __name__ == "__main__":
  # As a script: the repo on the path, and 8 emulated CPU devices set before
  # jax is imported.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import flax.jax_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
import flax.linen as nn  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import optax  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax import lax  # pylint: disable=g-import-not-at-top,wrong-import-position
# Raised by Explicit-axis type checks; jax 0.10 does not export it publicly.
from jax._src.core import ShardingTypeError  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import AxisType, NamedSharding  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top,wrong-import-position

N = 8  # devices every trap runs on


@dataclasses.dataclass
class Outcome:
  """What one trap shows."""

  wrong: Any
  right: Any
  expected: Any
  facts: dict = dataclasses.field(default_factory=dict)


def auto_mesh(axis="data", n=N):
  return jax.make_mesh((n,), (axis,), axis_types=(AxisType.Auto,))


def compile_counted(jitted, *args):
  """`jitted` compiled for `args`, and the collective counts of its HLO."""
  from compare import hlo  # pylint: disable=g-import-not-at-top
  compiled = jitted.lower(*args).compile()
  return compiled, hlo.count_collectives(compiled.as_text())


def collectives(jitted, *args):
  """Collective op counts in the optimised HLO of `jitted(*args)`."""
  return compile_counted(jitted, *args)[1]


def _data(rng, batch=64, features=3):
  x = rng.normal(size=(batch, features)).astype(np.float32)
  y = rng.normal(size=(batch,)).astype(np.float32)
  return x, y


def _time(fn, *args, repeats=10):
  jax.block_until_ready(fn(*args))
  start = time.perf_counter()
  for _ in range(repeats):
    jax.block_until_ready(fn(*args))
  return (time.perf_counter() - start) / repeats


# region: trap-gradient
def loss(params, x, y):
  """Squared error summed over this device's examples (the pmap recipe)."""
  return jnp.sum((x @ params["w"] + params["b"] - y) ** 2)


def pmean_of_grads(params, x, y):  # the pmap step, ported literally
  return lax.pmean(jax.grad(loss)(params, x, y), "data")


def pmean_of_loss(params, x, y):  # right with check_vma=True
  return jax.grad(lambda p: lax.pmean(loss(p, x, y), "data"))(params)


def pcast_then_grad(params, x, y):  # right with check_vma=True
  params = lax.pcast(params, "data", to="varying")
  return lax.pmean(jax.grad(loss)(params, x, y), "data")


def sharded_grad(fn, mesh, check_vma=True):  # True is shard_map's default
  return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P(), P("data"),
                                                        P("data")),
                               out_specs=P(), check_vma=check_vma))
# endregion


def gradient_trap() -> Outcome:
  """`pmean(grad)` under shard_map's default check_vma=True: N times too big."""
  mesh = auto_mesh()
  x, y = _data(np.random.default_rng(0))
  params = {"w": np.ones(3, np.float32), "b": np.zeros((), np.float32)}
  # pmap semantics: the mean over devices of per-device sums = global sum / N.
  expected = jax.jit(jax.grad(lambda p: loss(p, x, y) / N))(params)
  pmapped = jax.pmap(lambda p, x, y: lax.pmean(jax.grad(loss)(p, x, y), "d"),
                     axis_name="d", in_axes=(None, 0, 0))
  split = lambda a: a.reshape(N, -1, *a.shape[1:])
  wrong_step = sharded_grad(pmean_of_grads, mesh)
  right_steps = {
      "check_vma=False": sharded_grad(pmean_of_grads, mesh, check_vma=False),
      "pmean of loss": sharded_grad(pmean_of_loss, mesh),
      "pcast to varying": sharded_grad(pcast_then_grad, mesh)}
  right = {name: step(params, x, y) for name, step in right_steps.items()}
  right["pmap"] = flax.jax_utils.unreplicate(
      pmapped(params, split(x), split(y)))
  return Outcome(
      wrong=wrong_step(params, x, y), right=right, expected=expected,
      facts={"all-reduce wrong": collectives(wrong_step, params, x, y)[
          "all-reduce"],
             "all-reduce right": collectives(right_steps["check_vma=False"],
                                             params, x, y)["all-reduce"]})


def explicit_mesh_trap() -> Outcome:
  """What a mesh from `jax.make_mesh` (Explicit axes) refuses."""
  host = np.arange(16, dtype=np.float32)
  wrong, right = {}, {}
  # region: trap-explicit-mesh
  mesh = jax.make_mesh((N,), ("data",))  # axis_types default: Explicit
  double = jax.shard_map(lambda a: 2 * a, mesh=mesh, in_specs=P("data"),
                         out_specs=P("data"))
  placed = jax.device_put(host, NamedSharding(mesh, P("data")))
  try:
    wrong["shard_map(host array)"] = double(host)  # ValueError: in_specs ...
  except ValueError as err:                         # does not match the specs
    wrong["shard_map(host array)"] = err
  try:
    wrong["placed[3]"] = placed[3]  # ShardingTypeError: say the out sharding
  except ShardingTypeError as err:
    wrong["placed[3]"] = err
  right["shard_map(host array)"] = double(placed)  # place it as in_specs says
  right["placed[3]"] = placed.at[3].get(out_sharding=NamedSharding(mesh, P()))
  auto = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  right["Auto mesh: placed[3]"] = jax.device_put(
      host, NamedSharding(auto, P("data")))[3]  # Auto infers a sharding
  # endregion
  return Outcome(wrong=wrong, right=right,
                 expected={"shard_map(host array)": 2 * host,
                           "placed[3]": host[3],
                           "Auto mesh: placed[3]": host[3]},
                 facts={"axis_types": mesh.axis_types})


def unreplicate_trap() -> Outcome:
  """`x[0]` on pmap outputs is a collective; on the port it is a wrong row."""
  devices = jax.local_devices()[:N]
  host = np.arange(12, dtype=np.float32).reshape(4, 3)
  # region: trap-unreplicate
  # legacy: outputs carry a device axis [N, 4, 3]
  stacked = jax.pmap(lambda w: w * 1)(flax.jax_utils.replicate(host, devices))
  first = stacked[0]  # a compiled all-reduce; the result lives on all N devices
  one = flax.jax_utils.unreplicate(stacked)  # flax 0.12.8: shard 0, no collective
  # port: the replicated state has no device axis [4, 3]
  state = jax.device_put(host, NamedSharding(auto_mesh(), P()))
  habit = state[0]  # silently the first ROW of the parameter
  fetched = jax.device_get(state)  # right: nothing to unreplicate
  # endregion
  lone = devices[:1]  # a 1-device pmap while 8 devices exist
  lone_out = jax.pmap(lambda w: w * 1, devices=lone)(
      flax.jax_utils.replicate(host, lone))
  return Outcome(
      wrong=np.asarray(habit), right=fetched, expected=host,
      facts={"x[0] all-reduces": collectives(jax.jit(lambda a: a[0]),
                                             stacked)["all-reduce"],
             "x[0] devices": len(first.sharding.device_set),
             "unreplicate devices": len(one.sharding.device_set),
             "x[0] equals unreplicate": np.array_equal(first, one),
             # "fully replicated" to flax: the device axis stays
             "unreplicate shape, 1 of 8 devices": flax.jax_utils.unreplicate(
                 lone_out).shape,
             "x[0] ms": _time(lambda: stacked[0]) * 1e3,
             "unreplicate ms": _time(
                 lambda: flax.jax_utils.unreplicate(stacked)) * 1e3})


def pmap_metrics_trap() -> Outcome:
  """Reducing pmap outputs again outside jit: N-fold counts, other roundings."""
  batch = np.random.default_rng(1).random((64, 3), dtype=np.float32)
  split = batch.reshape(N, -1, 3)
  # region: trap-pmap-metrics
  def metric_sums(b):
    return lax.psum({"loss_sum": jnp.sum(b ** 0.5), "count": b.shape[0]}, "d")

  out = jax.pmap(metric_sums, axis_name="d")(split)  # N identical copies
  wrong = jnp.sum(out["count"])  # eager: an all-reduce program; counts N times
  right = flax.jax_utils.unreplicate(out)["count"]  # one copy (or out_specs=P())
  # and a float mean reduced on devices need not equal the host's:
  per_device = jax.pmap(lambda b: jnp.sum(b ** 0.5) / 7.0)(split)
  on_devices, on_host = jnp.mean(per_device), np.mean(np.asarray(per_device))
  # endregion
  return Outcome(
      wrong=int(wrong), right=int(right), expected=len(batch),
      facts={"eager sum all-reduces": collectives(jax.jit(jnp.sum),
                                                  out["count"])["all-reduce"],
             "eager sum devices": len(wrong.sharding.device_set),
             "mean on devices": float(on_devices),
             "mean on host": float(on_host)})


class TwoConv(nn.Module):
  """The smallest CNN that shows the trap: a conv whose input needs a grad."""

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(4, (3, 3))(x))
    x = nn.relu(nn.Conv(4, (3, 3))(x))
    return nn.Dense(10)(x.reshape(x.shape[0], -1))


def host_params(model, example, rng, members=None):
  """Random params for `model`, drawn with numpy.

  Compiling flax's init (threefry random bits) takes seconds on XLA:CPU; the
  traps need some params, not flax's initialisers. `members` stacks that many
  independent draws on a leading axis.
  """
  shapes = jax.eval_shape(model.init, jax.random.key(0), example)["params"]
  lead = () if members is None else (members,)
  return jax.tree.map(lambda s: (0.3 * rng.standard_normal(
      lead + s.shape)).astype(np.float32), shapes)


def _sgd_step(model):
  def step(params, images, labels):
    grads = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
        model.apply({"params": p}, images), labels).mean())(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
  return step


def vmap_ensemble_trap(time_it=False) -> Outcome:
  """An ensemble as `jit(vmap)` over member-sharded params: all-gathers."""
  model, rng = TwoConv(), np.random.default_rng(2)
  images = rng.random((32, 8, 8, 1), dtype=np.float32)
  labels = rng.integers(0, 10, 32).astype(np.int32)
  members = host_params(model, images[:1], rng, members=N)
  step = _sgd_step(model)
  # region: trap-vmap-ensemble
  mesh = auto_mesh("ensemble")
  params = jax.device_put(members, NamedSharding(mesh, P("ensemble")))
  batch = jax.device_put((images, labels), NamedSharding(mesh, P()))
  per_member = jax.vmap(step, in_axes=(0, None, None))
  wrong_step = jax.jit(per_member)  # the partitioner gathers members' tensors
  right_step = jax.jit(jax.shard_map(  # each device steps its own member
      per_member, mesh=mesh, in_specs=(P("ensemble"), P(), P()),
      out_specs=P("ensemble")))
  # endregion
  expected = jax.jit(jax.vmap(step, in_axes=(0, None, None)))(
      members, images, labels)
  wrong_step, wrong_counts = compile_counted(wrong_step, params, *batch)
  right_step, right_counts = compile_counted(right_step, params, *batch)
  wrong, right = wrong_step(params, *batch), right_step(params, *batch)
  facts = {"all-gather wrong": wrong_counts["all-gather"],
           "all-gather right": right_counts["all-gather"]}
  explicit = jax.make_mesh((N,), ("ensemble",))
  try:
    jax.jit(per_member)(
        jax.device_put(members, NamedSharding(explicit, P("ensemble"))),
        *jax.device_put((images, labels), NamedSharding(explicit, P())))
    facts["Explicit mesh"] = "ran"
  except ShardingTypeError as err:
    facts["Explicit mesh"] = type(err).__name__
  if time_it:
    facts["slowdown"] = (_time(wrong_step, params, *batch) /
                         _time(right_step, params, *batch))
  return Outcome(wrong=wrong, right=right, expected=expected, facts=facts)


class WiderConv(TwoConv):
  """TwoConv with 16 features: enough work for the scan slow path to show."""

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Conv(16, (3, 3))(x))
    x = nn.relu(nn.Conv(16, (3, 3))(x))
    return nn.Dense(10)(x.reshape(x.shape[0], -1))


def scan_trap(time_it=False, steps=4) -> Outcome:
  """`lax.scan` over conv training steps on XLA:CPU vs the same unrolled."""
  model, rng = WiderConv(), np.random.default_rng(3)
  images = rng.random((steps, 32, 8, 8, 1), dtype=np.float32)
  labels = rng.integers(0, 10, (steps, 32)).astype(np.int32)
  params = host_params(model, images[0, :1], rng)
  step = _sgd_step(model)
  # region: trap-scan
  def train(params, images, labels, unroll):
    body = lambda p, batch: (step(p, *batch), None)
    return lax.scan(body, params, (images, labels), unroll=unroll)[0]

  looped = jax.jit(lambda *a: train(*a, unroll=1))  # a while loop in HLO
  unrolled = jax.jit(lambda *a: train(*a, unroll=True))  # straight-line code
  # endregion
  expected = params
  for i in range(steps):
    expected = jax.jit(step)(expected, images[i], labels[i])
  looped = looped.lower(params, images, labels).compile()
  unrolled = unrolled.lower(params, images, labels).compile()
  facts = {}
  for name, text in (("looped", looped.as_text()),
                     ("unrolled", unrolled.as_text())):
    facts[f"{name} has while"] = " while(" in text
    # XLA:CPU's fast convolution wants b01f_01io->b01f; inside the loop the
    # weight-gradient convolutions keep another layout (the slow path).
    facts[f"{name} other conv layouts"] = sum(
        1 for line in text.splitlines()
        if " convolution(" in line and "dim_labels=b01f_01io->b01f" not in line)
  if time_it:
    facts["slowdown"] = (_time(looped, params, images, labels) /
                         _time(unrolled, params, images, labels))
  return Outcome(wrong=looped(params, images, labels),
                 right=unrolled(params, images, labels), expected=expected,
                 facts=facts)


# region: trap-microbatch-reshape
def split_naive(batch, k):
  """[B, ...] -> [k, B/k, ...]: the microbatch axis takes the device split."""
  return batch.reshape(k, batch.shape[0] // k, *batch.shape[1:])


def split_per_device(batch, k, n_devices=N):
  """[n*k*b, ...] -> [k, n*b, ...]: microbatch i = slice i of every shard."""
  b = batch.shape[0] // (n_devices * k)
  x = batch.reshape(n_devices, k, b, *batch.shape[1:])
  return jnp.swapaxes(x, 0, 1).reshape(k, n_devices * b, *batch.shape[1:])


def accumulate(batch, split, k):
  microbatches = split(batch, k)
  return lax.scan(lambda acc, mb: (acc + jnp.sum(mb ** 2), None), 0.0,
                  microbatches)[0]
# endregion


def microbatch_reshape_trap() -> Outcome:
  """Where the microbatch axis of a `P('data')` batch ends up."""
  host = np.arange(128 * 2, dtype=np.float32).reshape(128, 2) / 256
  auto, explicit = auto_mesh(), jax.make_mesh((N,), ("data",))
  on_auto = jax.device_put(host, NamedSharding(auto, P("data")))
  on_explicit = jax.device_put(host, NamedSharding(explicit, P("data")))
  def spec(a):  # padded: Auto drops trailing Nones, Explicit keeps them
    return tuple(a.sharding.spec) + (None,) * (a.ndim - len(a.sharding.spec))
  wrong = {"Auto k=8": spec(split_naive(on_auto, 8)),
           "Auto k=4": spec(split_naive(on_auto, 4)),
           "Explicit k=8": spec(split_naive(on_explicit, 8))}
  right = {name: spec(split_per_device(a, k))
           for name, a, k in (("Auto k=8", on_auto, 8), ("Auto k=4", on_auto, 4),
                              ("Explicit k=8", on_explicit, 8))}
  facts = {}
  for name, split in (("naive", split_naive), ("per device", split_per_device)):
    fn = jax.jit(lambda a, split=split: accumulate(a, split, 4))
    facts[f"{name} Auto all-gathers"] = collectives(fn, on_auto)["all-gather"]
    facts[f"{name} Auto sum"] = float(fn(on_auto))
    try:
      with jax.set_mesh(explicit):
        facts[f"{name} Explicit scan"] = float(
            jax.jit(lambda a, split=split: accumulate(a, split, 8))(on_explicit))
    except (ValueError, ShardingTypeError) as err:
      facts[f"{name} Explicit scan"] = f"{type(err).__name__}: {err}"[:80]
  facts["host sum"] = float(np.sum(host.astype(np.float64) ** 2))
  return Outcome(wrong=wrong, right=right,
                 expected=dict.fromkeys(right, (None, "data", None)),
                 facts=facts)


def loss_normalisation_trap() -> Outcome:
  """The classic loss (sum per device, mean across) ties lr to device count."""
  x, y = _data(np.random.default_rng(4))
  params = {"w": np.ones(3, np.float32), "b": np.zeros((), np.float32)}
  # region: trap-loss-normalisation
  def classic(p, x, y):  # summed over the device's examples
    return jnp.sum((x @ p["w"] + p["b"] - y) ** 2)

  def local_mean(p, x, y):  # averaged over the device's examples
    return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

  def data_parallel_grad(loss_fn, n_devices):
    # pmean of per-device gradients: the global loss is sum / n_devices
    step = jax.pmap(lambda p, x, y: lax.pmean(jax.grad(loss_fn)(p, x, y), "d"),
                    axis_name="d", in_axes=(None, 0, 0),
                    devices=jax.local_devices()[:n_devices])
    split = lambda a: a.reshape(n_devices, -1, *a.shape[1:])
    return jax.device_get(flax.jax_utils.unreplicate(
        step(params, split(x), split(y))))
  # endregion
  wrong, right = {}, {}
  for n in (2, 4, 8):
    wrong[n] = data_parallel_grad(classic, n)
    right[n] = data_parallel_grad(local_mean, n)
  expected = jax.grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(
      params)
  return Outcome(wrong=wrong, right=right, expected=expected,
                 facts={"grad scale 2->8 devices": float(
                     wrong[8]["w"][0] / wrong[2]["w"][0])})


TRAPS = (gradient_trap, explicit_mesh_trap, unreplicate_trap,
         pmap_metrics_trap, vmap_ensemble_trap, scan_trap,
         microbatch_reshape_trap, loss_normalisation_trap)


def main():
  print(f"jax {jax.__version__}, {jax.device_count()} "
        f"{jax.devices()[0].platform} devices")
  for trap in TRAPS:
    start = time.perf_counter()
    timed = "time_it" in trap.__code__.co_varnames
    outcome = trap(time_it=True) if timed else trap()
    print(f"\n{trap.__name__} ({time.perf_counter() - start:.1f} s): "
          f"{trap.__doc__}")
    for key, value in outcome.facts.items():
      print(f"  {key}: {value:.9g}" if isinstance(value, float)
            else f"  {key}: {value}")


if __name__ == "__main__":
  main()
