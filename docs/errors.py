"""Every wrong idiom the guide indexes, run: the exact message JAX prints.

Each `Case` runs one habit from pmap code (or one wrong port) and returns the
exception (or warning) it raises on the pinned stack. `docs/MIGRATION.md`'s
index of error messages quotes the first line of each (`quote`) from
`docs/measured/errors.json`, which `python -m docs.build_guide --measure
errors` rewrites (`python -m docs.errors --json FILE`, 8 emulated devices).
`tests/test_error_messages.py` runs every case again and fails when JAX
prints something the guide does not quote.

A case with `processes=2` starts 2 jax.distributed processes on localhost
and raises here what process 0 raised.
Names: JAX quotes the function a wrong idiom applies, so the cases apply
functions named as a reader's own code names them (`step`, `loss`, `f`, at
module level: a function nested in a case would be quoted as
`_case.<locals>.name`), and the index quotes no name of this repository
(`tests/test_error_messages.py` checks).

A message too slow to raise (gloo's 30-s timeout) is a `Recorded` row
(`docs.errors_recorded`).
optax 0.2.7 cannot be installed beside optax 0.2.8; its case runs the line
optax 0.2.7 runs on import (`jax.config.update('jax_pmap_shmap_merge',
False)`, in `optax/contrib/_complex_valued.py`) and, when `OPTAX_027_PATH`
names a directory holding optax 0.2.7 (`pip install --no-deps --target DIR
optax==0.2.7`), imports the real package in a subprocess as well.
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import warnings
from collections.abc import Callable

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax import lax  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import AxisType, NamedSharding  # pylint: disable=g-import-not-at-top,wrong-import-position
from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top,wrong-import-position

from docs import errors_processes  # pylint: disable=g-import-not-at-top,wrong-import-position
from docs.errors_recorded import RECORDED, Recorded  # pylint: disable=g-import-not-at-top,wrong-import-position,unused-import

N = 8
ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Case:
  """One wrong idiom: what it is, where the guide fixes it, and the run."""

  id: str
  idiom: str  # the wrong code, in one line of markdown
  fix: str  # the guide's anchor (#...) that fixes it
  run: Callable[[], object]
  processes: int = 1  # jax.distributed processes it needs (it starts them)


def _raised(fn):
  """The exception or warning `fn` raises; AssertionError if it runs clean."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
      fn()
    except Exception as err:  # pylint: disable=broad-except
      return err
  for warning in caught:
    if issubclass(warning.category, DeprecationWarning):
      return warning.category(str(warning.message))
  raise AssertionError(f"{fn} ran without an error or a DeprecationWarning")


def quote(err: BaseException) -> str:
  """`Type: first line of the message`, as the guide quotes it."""
  lines = str(err).strip().splitlines() or [""]
  return f"{type(err).__name__}: {lines[0].strip()}"


def _explicit_mesh():
  return jax.make_mesh((N,), ("data",))  # Explicit axes by default


def _stacked():
  return np.ones((N, 2), np.float32)


def _device_put_replicated():
  jax.device_put_replicated(np.ones(3), jax.devices())


def _device_put_sharded():
  jax.device_put_sharded(list(_stacked()), jax.devices())


def _in_specs_mismatch():
  mesh = _explicit_mesh()
  jax.shard_map(lambda a: 2 * a, mesh=mesh, in_specs=P("data"),
                out_specs=P("data"))(np.arange(16, dtype=np.float32))


def _explicit_indexing():
  mesh = _explicit_mesh()
  placed = jax.device_put(np.arange(16, dtype=np.float32),
                          NamedSharding(mesh, P("data")))
  return placed[3]


def _explicit_reshape():
  mesh = _explicit_mesh()
  batch = jax.device_put(np.ones((128, 2), np.float32),
                         NamedSharding(mesh, P("data")))
  with jax.set_mesh(mesh):
    jax.jit(lambda b: b.reshape(4, 32, 2))(batch)


def _pmap_of_explicit_array():
  mesh = _explicit_mesh()
  jax.pmap(lambda a: 2 * a)(jax.device_put(_stacked(),
                                           NamedSharding(mesh, P("data"))))


def _pmap_in_context_mesh():
  with jax.set_mesh(jax.make_mesh((N,), ("model",))):
    jax.pmap(lambda a: 2 * a)(_stacked())


def _nested_pmap():
  from docs import idioms  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  idioms.nested_pmap(np.ones((2, N // 2, 3, 2), np.float32))


def _incompatible_devices():
  devices = jax.devices()
  # A pmap over devices 4-7, its output fed to a pmap over 0-3 under jit:
  # the old pmap copied the inputs over; today's is a shard_map in the jit.
  out = jax.pmap(lambda a: 2 * a, devices=devices[4:])(_stacked()[:4])
  jax.jit(jax.pmap(f, devices=devices[:4]))(out)


def _optax_027():
  path = os.environ.get("OPTAX_027_PATH")
  if path:  # the real import, in a fresh interpreter
    result = subprocess.run(
        [sys.executable, "-c", "import optax"], capture_output=True,
        text=True, env={**os.environ, "PYTHONPATH": path}, check=False)
    last = result.stderr.strip().splitlines()[-1]
    kind, _, message = last.partition(": ")
    raise {"AttributeError": AttributeError}.get(kind, RuntimeError)(message)
  jax.config.update("jax_pmap_shmap_merge", False)  # optax 0.2.7's import


def _pvary():
  return lax.pvary


def _tree_map():
  return jax.tree_map


def _optimizers():
  import jax.experimental.optimizers  # pylint: disable=g-import-not-at-top,import-outside-toplevel,unused-import


def _check_rep():
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  jax.shard_map(lambda a: a, mesh=mesh, in_specs=P("data"),
                out_specs=P("data"), check_rep=False)


def _ring_sum(x):
  """A sum over the ring by ppermute: replicated, but not provably so."""
  total = x
  for shift in range(1, N):
    total = total + lax.ppermute(x, "data", [(i, (i + shift) % N)
                                             for i in range(N)])
  return total


# The functions the cases apply, named as a reader's own code names them:
# JAX quotes these names in its messages.
def step(x):
  """A step that sums over the ring by hand (`_ring_sum`)."""
  return _ring_sum(x)


def loss(x):
  """This device's sum: a scalar."""
  return x.sum()


def f(a):
  """The function a pmap applies."""
  return a + 1


def _check_vma_false_positive():
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("data"),
                        out_specs=P()))(np.arange(N, dtype=np.float32))


def _scalar_out_specs():
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  jax.jit(jax.shard_map(loss, mesh=mesh, in_specs=P("data"),
                        out_specs=P("data")))(np.ones(4 * N, np.float32))


def _experimental_shard_map():
  from jax.experimental import shard_map  # pylint: disable=g-import-not-at-top,import-outside-toplevel
  return shard_map.shard_map


def _with_mesh():
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  with mesh:
    pass


def _scan_over_sharded_microbatches():
  # Gradient accumulation's naive split (docs/traps_compiler.py's
  # split_naive) with k = N: the device split lands on the scanned axis.
  mesh = _explicit_mesh()
  batch = jax.device_put(np.ones((16 * N, 2), np.float32),
                         NamedSharding(mesh, P("data")))
  def accumulate(b):
    microbatches = b.reshape(N, 16, 2)  # [k, B // k, ...]
    return lax.scan(lambda acc, mb: (acc + jnp.sum(mb ** 2), None), 0.0,
                    microbatches)[0]
  with jax.set_mesh(mesh):
    jax.jit(accumulate)(batch)


def _scan_carry_vma():
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  def accumulate(xs):  # the carry starts replicated, then adds this device's xs
    return lax.scan(lambda acc, x: (acc + x, None), jnp.zeros(2), xs)[0]
  jax.jit(jax.shard_map(accumulate, mesh=mesh, in_specs=P("data"),
                        out_specs=P("data")))(np.ones((4 * N, 2), np.float32))


def _closure_over_explicit():
  # A step that closes over a weight sharded on an Explicit mesh.
  mesh = _explicit_mesh()
  sharding = jax.sharding.NamedSharding(mesh, P("data"))
  weights = jax.device_put(np.arange(16, dtype=np.float32), sharding)
  jax.jit(jax.shard_map(lambda a: a * weights, mesh=mesh, in_specs=P("data"),
                        out_specs=P("data")))(
                            jax.device_put(np.ones(16, np.float32), sharding))


def _carry_mesh_call(body):
  mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Auto,))
  jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"),
                        out_specs=P("data")))(np.ones((4 * N, 2), np.float32))


def _fori_carry_vma():  # the carry starts replicated, then adds this device's
  _carry_mesh_call(lambda xs: lax.fori_loop(
      0, 4, lambda i, acc: acc + xs[i], jnp.zeros(2)))


def _while_carry_vma():
  _carry_mesh_call(lambda xs: lax.while_loop(
      lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] + xs[c[0]]),
      (0, jnp.zeros(2)))[1])


def _cond_branches_vma():  # one branch per-device, the other replicated
  _carry_mesh_call(lambda xs: lax.cond(
      xs[0, 0] > 0, lambda: xs.sum(0), lambda: jnp.zeros(2)))


def _unbound_axis():
  # A step written for `jax.pmap(step, axis_name='batch')`, run under jit.
  def mean_over_devices(grads):
    return lax.psum(grads, "batch") / N
  jax.jit(mean_over_devices)(np.ones(3, np.float32))


CASES = (
    Case("device-put-replicated", "`jax.device_put_replicated(x, devices)`",
         "#staged", _device_put_replicated),
    Case("device-put-sharded", "`jax.device_put_sharded(shards, devices)`",
         "#staged", _device_put_sharded),
    Case("in-specs-mismatch", "`shard_map` on a `jax.make_mesh` mesh fed a "
         "host array", "#trap-explicit", _in_specs_mismatch),
    Case("sharding-type-error", "`x[3]` on an array on a `jax.make_mesh` "
         "mesh", "#trap-explicit", _explicit_indexing),
    Case("explicit-reshape", "`batch.reshape(k, B // k, ...)` of a batch on "
         "an Explicit mesh", "#trap-microbatch", _explicit_reshape),
    Case("pmap-explicit-keyerror", "`jax.pmap(f)(x)` with `x` on a "
         "`jax.make_mesh` mesh", "#staged", _pmap_of_explicit_array),
    Case("context-mesh", "`jax.pmap(f)(x)` inside `with jax.set_mesh(mesh):`",
         "#staged", _pmap_in_context_mesh),
    Case("nested-pmap", "`jax.pmap(jax.pmap(f, axis_name='inner'), "
         "axis_name='outer')`", "#nested-pmap", _nested_pmap),
    Case("incompatible-devices", "a `jax.pmap` under `jax.jit` fed arrays "
         "that live on other devices", "#staged", _incompatible_devices),
    Case("optax-027", "`import optax` with optax 0.2.7 on jax 0.10",
         "#pins", _optax_027),
    Case("pvary", "`lax.pvary(x, axis)`", "#idiom-map", _pvary),
    Case("tree-map", "`jax.tree_map(f, tree)`", "#idiom-map", _tree_map),
    Case("optimizers", "`import jax.experimental.optimizers`", "#idiom-map",
         _optimizers),
    Case("check-rep", "`shard_map(..., check_rep=False)`", "#check-vma",
         _check_rep),
    Case("check-vma-false-positive", "`out_specs=P()` on a value replicated "
         "by hand (a `ppermute` ring sum)", "#check-vma",
         _check_vma_false_positive),
    Case("scalar-out-specs", "a per-device scalar returned with "
         "`out_specs=P('data')`", "#rank", _scalar_out_specs),
    Case("experimental-shard-map", "`from jax.experimental.shard_map import "
         "shard_map` (a warning)", "#check-vma", _experimental_shard_map),
    Case("with-mesh", "`with mesh:` (a warning)", "#idiom-map", _with_mesh),
    Case("scan-sharded-xs", "`lax.scan` over microbatches split by "
         "`batch.reshape(k, B // k, ...)` (k = N) on an Explicit mesh",
         "#trap-microbatch", _scan_over_sharded_microbatches),
    Case("scan-carry-vma", "a `lax.scan` in `shard_map` whose carry starts "
         "replicated (`jnp.zeros`) and adds each device's values",
         "#scan-carry-vma", _scan_carry_vma),
    Case("fori-carry-vma", "a `lax.fori_loop` in `shard_map` whose carry "
         "starts replicated and adds each device's values", "#scan-carry-vma",
         _fori_carry_vma),
    Case("while-carry-vma", "a `lax.while_loop` in `shard_map` whose carry "
         "starts replicated and adds each device's values", "#scan-carry-vma",
         _while_carry_vma),
    Case("cond-branches-vma", "a `lax.cond` in `shard_map` with one branch "
         "per-device and the other replicated (`jnp.zeros`)",
         "#scan-carry-vma", _cond_branches_vma),
    Case("unbound-axis", "`lax.psum(x, 'batch')` in a function run by "
         "`jax.jit` (no pmap or shard_map binds `'batch'`)", "#unbound-axis",
         _unbound_axis),
    Case("closure-explicit", "a `shard_map` body that closes over an "
         "array sharded on an Explicit mesh (pass it as an argument)",
         "#idiom-map", _closure_over_explicit),
    Case("non-addressable-fetch", "`jax.device_get(x)` (or `np.asarray(x)`) "
         "of an array over several processes' devices (2 processes)",
         "#cheap-fetch", errors_processes.fetch_across_processes, processes=2),
)



def messages() -> dict[str, str]:
  """Each case's quoted message, run now."""
  return {case.id: quote(_raised(case.run)) for case in CASES}


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  found = messages()
  record = {"what": "the first line of what each wrong idiom raises",
            "jax_version": jax.__version__,
            "devices": jax.device_count(),
            "optax_027_real_import": bool(os.environ.get("OPTAX_027_PATH")),
            "processes": {case.id: case.processes for case in CASES
                          if case.processes > 1},
            "messages": found}
  if argv[:1] == ["--json"]:
    with open(argv[1], "w", encoding="utf-8") as f:
      json.dump(record, f, indent=1)
      f.write("\n")
  else:
    for key, message in found.items():
      print(f"{key}: {message}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
