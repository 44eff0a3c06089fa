"""The migration's traps as minimal runnable examples, the wrong next to the right.

Every function returns an `Outcome`: what the pmap habit gives (`wrong`: a
value, or the exception it raises), what the fix gives (`right`), the ground
truth computed another way (`expected`) and the numbers worth reporting
(`facts`). This file holds the traps that give wrong numbers or refuse to
run; `docs/traps_compiler.py` those in what the compiler makes of a port.
`tests/test_traps.py` runs them all; `docs/MIGRATION.md` shows the tagged
regions. Needs 8 devices: `python -m docs.traps` emulates them on CPU and
prints what each trap shows; `python -m docs.traps --json FILE` (run by
`python -m docs.build_guide --measure traps`) records it, with each trap's
workload, for the guide's figures.
"""

import json
import os
import sys
import time

if __name__ == "__main__":
  # Run as `python -m docs.traps`: 8 emulated CPU devices, set before jax is
  # imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import flax.jax_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax import lax  # pylint: disable=g-import-not-at-top,wrong-import-position
# Raised by Explicit-axis type checks. Private API: jax 0.10.2 exports no
# public name for it (checked on 0.10.2; `except Exception` is the public
# alternative).
from jax.sharding import AxisType, NamedSharding  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top,wrong-import-position

from docs import traps_compiler  # pylint: disable=g-import-not-at-top,wrong-import-position
from docs.traps_common import N, Outcome, auto_mesh  # pylint: disable=g-import-not-at-top,wrong-import-position
from docs.traps_common import collectives, data, timed  # pylint: disable=g-import-not-at-top,wrong-import-position


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
  x, y = data(np.random.default_rng(0))
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
  # region: trap-explicit-mesh
  host, wrong, right = np.arange(16, dtype=np.float32), {}, {}
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
  except Exception as err:  # jax's ShardingTypeError: no public name in 0.10.2
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
  # region: trap-unreplicate
  host = np.arange(12, dtype=np.float32).reshape(4, 3)  # the parameter
  # legacy: outputs carry a device axis [N, 4, 3]
  stacked = jax.pmap(lambda w: w * 1)(flax.jax_utils.replicate(host))
  first = stacked[0]  # a compiled all-reduce; the result lives on all N devices
  one = flax.jax_utils.unreplicate(stacked)  # flax 0.12.8: shard 0, no collective
  # port: the replicated state has no device axis [4, 3]
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  state = jax.device_put(host, NamedSharding(mesh, P()))
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
             "x[0] ms": timed(lambda: stacked[0]) * 1e3,
             "unreplicate ms": timed(
                 lambda: flax.jax_utils.unreplicate(stacked)) * 1e3})


def pmap_metrics_trap() -> Outcome:
  """Reducing pmap outputs again outside jit: N-fold counts, other roundings."""
  # region: trap-pmap-metrics
  split = np.random.default_rng(1).random((N, 8, 3), dtype=np.float32)
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
      wrong=int(wrong), right=int(right), expected=N * 8,
      facts={"eager sum all-reduces": collectives(jax.jit(jnp.sum),
                                                  out["count"])["all-reduce"],
             "eager sum devices": len(wrong.sharding.device_set),
             "mean on devices": float(on_devices),
             "mean on host": float(on_host)})


def loss_normalisation_trap() -> Outcome:
  """The classic loss (sum per device, mean across) ties lr to device count."""
  x, y = data(np.random.default_rng(4))
  params = {"w": np.ones(3, np.float32), "b": np.zeros((), np.float32)}
  # region: trap-loss-normalisation
  def classic(p, x, y):  # summed over the device's examples
    return jnp.sum((x @ p["w"] + p["b"] - y) ** 2)

  def local_mean(p, x, y):  # averaged over the device's examples
    return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

  def data_parallel_grad(loss_fn, n_devices, params, x, y):
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
    wrong[n] = data_parallel_grad(classic, n, params, x, y)
    right[n] = data_parallel_grad(local_mean, n, params, x, y)
  expected = jax.grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(
      params)
  return Outcome(wrong=wrong, right=right, expected=expected,
                 facts={"grad scale 2->8 devices": float(
                     wrong[8]["w"][0] / wrong[2]["w"][0])})


TRAPS = (gradient_trap, explicit_mesh_trap, unreplicate_trap,
         pmap_metrics_trap, traps_compiler.vmap_ensemble_trap,
         traps_compiler.scan_trap, traps_compiler.microbatch_reshape_trap,
         loss_normalisation_trap)

# What each trap runs on: every figure the guide quotes names its workload
# (a short label, then the whole description).
WORKLOADS = {
    "gradient_trap": ("linear model, 8 devices", "linear model (3 features),"
                      " batch 64 over 8 devices, one gradient"),
    "explicit_mesh_trap": ("16 floats, Explicit mesh", "16 floats on an "
                           "Explicit 8-device mesh"),
    "unreplicate_trap": ("4x3 parameter, pmap", "a 4x3 parameter, pmap over "
                         "8 devices"),
    "pmap_metrics_trap": ("64x3 batch, pmap metrics", "64x3 batch, metric "
                          "sums psummed in pmap over 8 devices"),
    "vmap_ensemble_trap": ("two-conv CNN, 8 members", "two-conv CNN (4 "
                           "features), 8 members on 8 devices, batch 32 of "
                           "8x8 images, one SGD step"),
    "scan_trap": ("two-conv CNN, 4 scanned steps", "two-conv CNN (16 "
                  "features), 4 SGD steps on batches of 32 8x8 images, "
                  "one device"),
    "microbatch_reshape_trap": ("128x2 batch, microbatches", "128x2 batch "
                                "on 8 devices, sum of squares over "
                                "microbatches"),
    "loss_normalisation_trap": ("linear model, 2/4/8 devices", "linear "
                                "model (3 features), batch 64 over 2, 4 and "
                                "8 devices"),
}


def _plain(value):
  """A fact as JSON: numbers, strings, bools and tuples as lists."""
  if isinstance(value, (bool, int, float, str)) or value is None:
    return value
  if isinstance(value, (tuple, list)):
    return [_plain(v) for v in value]
  return str(value)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  print(f"jax {jax.__version__}, {jax.device_count()} "
        f"{jax.devices()[0].platform} devices")
  record = {"what": "what each trap shows (docs/traps.py)",
            "jax_version": jax.__version__, "devices": jax.device_count(),
            "platform": jax.devices()[0].platform,
            "load_average": [round(os.getloadavg()[0], 2)], "traps": {}}
  for trap in TRAPS:
    start = time.perf_counter()
    timed_trap = "time_it" in trap.__code__.co_varnames
    outcome = trap(time_it=True) if timed_trap else trap()
    print(f"\n{trap.__name__} ({time.perf_counter() - start:.1f} s): "
          f"{trap.__doc__}")
    for key, value in outcome.facts.items():
      print(f"  {key}: {value:.9g}" if isinstance(value, float)
            else f"  {key}: {value}")
    label, workload = WORKLOADS[trap.__name__]
    record["traps"][trap.__name__] = {
        "label": label, "workload": workload,
        "facts": {k: _plain(v) for k, v in outcome.facts.items()}}
  record["load_average"].append(round(os.getloadavg()[0], 2))
  if argv[:1] == ["--json"]:
    with open(argv[1], "w", encoding="utf-8") as f:
      json.dump(record, f, indent=1)
      f.write("\n")


if __name__ == "__main__":
  main()
