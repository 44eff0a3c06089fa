"""What a port needs at run time: fetching, scan carries, nesting, the switch.

- `cheap-fetch`: one copy of a replicated result, without a collective or
  a transfer of every copy.
- `scan-carry-vma`: a `lax.scan` carry that starts replicated and becomes
  per-device, inside `shard_map(check_vma=True)`.
- `nested-pmap`: `pmap(pmap(...))` (refused on jax 0.10) as one shard_map
  over a 2-D mesh, as nested shard_maps, and as nested `jax.smap`.
- `escape-hatch`: `JAX_PMAP_SHMAP_MERGE=0` and its two other forms on jax
  0.10.2, each measured in a fresh interpreter (`escape_hatch`).

The functions after the regions run them for `tests/test_needs.py`; they
need 8 devices (`python -m docs.needs_runtime` emulates them on CPU).
"""
# Each region imports what it uses, so that it can be copied alone.
# pylint: disable=reimported,g-import-not-at-top,wrong-import-position
# pylint: disable=ungrouped-imports,g-bad-import-order

import os

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")


# region: cheap-fetch
import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P


def column_sums(b, axis):
  return lax.psum(b.sum(0), axis)  # the same on every device


def pmap_fetch(x):  # x: [N, b, d]
  step = lambda b: column_sums(b, "batch")
  stacked = jax.pmap(step, axis_name="batch")(x)  # [N, d]: N copies
  # jax.device_get(stacked)[0] copies all N rows to the host; stacked[0]
  # is a compiled all-reduce. Device 0's shard is one row, no collective:
  first = np.asarray(stacked.addressable_shards[0].data[0])
  # out_axes=None returns one [d] copy; nothing checks the copies agree:
  # an output not reduced over the axis comes back as device 0's.
  single = jax.pmap(step, axis_name="batch", out_axes=None)(x)
  return first, np.asarray(single)


def port_fetch(x, mesh):  # x: [N * b, d], split P("data")
  step = jax.jit(jax.shard_map(lambda b: column_sums(b, "data"), mesh=mesh,
                               in_specs=P("data"), out_specs=P()))
  out = step(x)  # [d], fully replicated: device_get copies one shard
  return jax.device_get(out), np.asarray(out.addressable_shards[0].data)
# endregion


# region: scan-carry-vma
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P


def add(total, row):
  return total + row, total


def running_sum(block):  # under check_vma=True (shard_map's default)
  init = jnp.zeros(())  # the same on every device: "invariant"
  # TypeError: scan body function carry input and carry output must have
  # equal types (the carry becomes per-device once a row is added)
  total, _ = lax.scan(add, init, block)
  return total[None]


def running_sum_fixed(block, axis="data"):
  init = lax.pcast(jnp.zeros(()), axis, to="varying")  # lax.pvary is gone
  total, _ = lax.scan(add, init, block)  # or init = jnp.zeros_like(block[0])
  return total[None]


def per_device_sums(body, mesh):  # x: [N * b], split P("data")
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"),
                               out_specs=P("data")))
# endregion


# region: nested-pmap
import jax
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P


def member_mean(b):  # rows of one data shard -> the member's mean row
  return lax.pmean(b.mean(0), "data")[None]  # over "data" only


def on_2d_mesh(members, shards):  # was pmap(pmap(f, "data"), "members")
  mesh = jax.make_mesh((members, shards), ("members", "data"),
                       axis_types=(AxisType.Auto,) * 2)
  return mesh, jax.jit(jax.shard_map(
      member_mean, mesh=mesh, in_specs=P(("members", "data")),
      out_specs=P("members")))  # x: [members * shards * b, d]


def nested(mesh):  # a shard_map per axis, the inner on the outer's mesh
  inner = lambda b: jax.shard_map(  # (the concrete mesh is refused there)
      member_mean, mesh=jax.sharding.get_abstract_mesh(), in_specs=P("data"),
      out_specs=P(), axis_names={"data"})(b)
  return jax.jit(jax.shard_map(inner, mesh=mesh, in_specs=P("members"),
                               out_specs=P("members"), axis_names={"members"}))


def nested_smap():  # jax.smap: one axis at a time; call under jax.set_mesh
  inner = jax.smap(member_mean, in_axes=0, out_axes=None, axis_name="data")
  return jax.jit(jax.smap(inner, in_axes=0, out_axes=0,
                          axis_name="members"))
# endregion


# region: escape-hatch
# Up to jax 0.9.2 these brought back the original pmap; on jax 0.10.2:
#   JAX_PMAP_SHMAP_MERGE=0                    ignored: pmap is shard_map
#   jax.config.update("jax_pmap_shmap_merge", False)
#       AttributeError: Unrecognized config option: jax_pmap_shmap_merge
#   --jax_pmap_shmap_merge=false, in an absl app (config_with_absl):
#       FATAL Flags parsing error: Unknown command line flag
#       'jax_pmap_shmap_merge' (exit 1); jax.config.parse_flags_with_absl()
#       ignores it.
import logging

from legacy_pmap import devices


def check_pmap_runtime():
  """Which pmap runs ("original" or "shard_map"), warning when the
  environment asks for the original and does not get it."""
  warning = devices.pmap_runtime_warning()
  if warning:
    logging.warning(warning)
  return devices.pmap_runtime()
# endregion


# The regions on the same numbers (8 devices), for tests/test_needs.py.
import json
import subprocess
import sys

import flax.jax_utils
from jax.sharding import NamedSharding

from docs.needs import outcome
from docs.traps_common import N, auto_mesh


def fetches(b=2, d=3):
  """One copy fetched from pmap's and the port's replicated results."""
  x = np.arange(N * b * d, dtype=np.float32).reshape(N * b, d)
  mesh = auto_mesh()
  stacked = jax.pmap(lambda a: column_sums(a, "batch"),
                     axis_name="batch")(x.reshape(N, b, d))
  unreduced = jax.pmap(lambda a: a.sum(0), axis_name="batch",
                       out_axes=None)(x.reshape(N, b, d))
  port = jax.jit(jax.shard_map(lambda a: column_sums(a, "data"), mesh=mesh,
                               in_specs=P("data"), out_specs=P()))(x)
  return {"expected": x.sum(0), "pmap": pmap_fetch(x.reshape(N, b, d)),
          "port": port_fetch(jax.device_put(
              x, NamedSharding(mesh, P("data"))), mesh),
          "unreplicate": np.asarray(flax.jax_utils.unreplicate(stacked)),
          "device_get rows": jax.device_get(stacked).shape,
          "shard 0 rows": stacked.addressable_shards[0].data.shape,
          "port fully replicated": port.is_fully_replicated,
          "unreduced, out_axes=None": np.asarray(unreduced),
          "unreduced copies": [np.asarray(s.data)
                               for s in unreduced.addressable_shards],
          "device 0's rows": x[:b].sum(0)}


def scan_carries(b=4):
  """The replicated carry (error), pcast, zeros_like and check_vma=False."""
  x = np.arange(N * b, dtype=np.float32)
  mesh = auto_mesh()
  x_on_mesh = jax.device_put(x, NamedSharding(mesh, P("data")))
  loose = jax.jit(jax.shard_map(running_sum, mesh=mesh, in_specs=P("data"),
                                out_specs=P("data"), check_vma=False))

  def zeros_like(block):
    total, _ = lax.scan(add, jnp.zeros_like(block[0]), block)
    return total[None]

  return {"expected": x.reshape(N, b).sum(1),
          "replicated carry": outcome(per_device_sums(running_sum, mesh),
                                      x_on_mesh),
          "pcast": np.asarray(per_device_sums(running_sum_fixed, mesh)(
              x_on_mesh)),
          "zeros_like": np.asarray(per_device_sums(zeros_like, mesh)(
              x_on_mesh)),
          "check_vma=False": np.asarray(loose(x_on_mesh)),
          "lax.pvary exists": hasattr(lax, "pvary")}


def nested_pmaps(members=2, shards=4, b=3, d=2):
  """The member means four ways: nested pmap (refused), 2-D mesh, nested
  shard_map, nested smap."""
  x = np.arange(members * shards * b * d, dtype=np.float32).reshape(
      members * shards * b, d)
  legacy = jax.pmap(jax.pmap(member_mean, axis_name="data"),
                    axis_name="members")
  mesh, step = on_2d_mesh(members, shards)
  out = {"expected": x.reshape(members, shards * b, d).mean(1),
         "nested pmap": outcome(legacy,
                                x.reshape(members, shards, b, d)),
         "2-D mesh": np.asarray(step(x)),
         "jax.smap exists": hasattr(jax, "smap")}
  out["nested shard_map"] = np.asarray(nested(mesh)(x))
  with jax.set_mesh(mesh):
    out["nested smap"] = np.asarray(nested_smap()(x))
  out["nested shard_map, concrete mesh inside"] = outcome(
      jax.jit(jax.shard_map(
          lambda b: jax.shard_map(member_mean, mesh=mesh, in_specs=P("data"),
                                  out_specs=P(), axis_names={"data"})(b),
          mesh=mesh, in_specs=P("members"), out_specs=P("members"),
          axis_names={"members"})), x)
  out["nested smap, no set_mesh"] = outcome(nested_smap(), x)
  return out


# Each form of the switch, alone: (extra environment, argv, what runs).
_PROBE = ("import json, jax\n"
          "from legacy_pmap import devices\n"
          "def report(*_):\n"
          "  print(json.dumps({{'runtime': devices.pmap_runtime(),\n"
          "    'warning': devices.pmap_runtime_warning(),\n"
          "    'option': 'jax_pmap_shmap_merge' in jax.config.values}}))\n"
          "{run}\n")
FORMS = {
    "environment": ({"JAX_PMAP_SHMAP_MERGE": "0"}, [], "report()"),
    "config.update": ({}, [], "jax.config.update("
                      "'jax_pmap_shmap_merge', False)\nreport()"),
    "absl app": ({}, ["--jax_pmap_shmap_merge=false"],
                 "from absl import app\njax.config.config_with_absl()\n"
                 "app.run(report)"),
    "parse_flags_with_absl": ({}, ["--jax_pmap_shmap_merge=false"],
                              "jax.config.parse_flags_with_absl()\n"
                              "report()"),
}


def escape_hatch(timeout=120):
  """Each form of the switch in a fresh interpreter, all at once: the exit
  status, the report (None if it failed first), stderr's last lines."""
  env = {k: v for k, v in os.environ.items() if k != "JAX_PMAP_SHMAP_MERGE"}
  env["JAX_PLATFORMS"] = "cpu"
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  runs = {name: subprocess.Popen(
      [sys.executable, "-c", _PROBE.format(run=run), *argv], cwd=root,
      env={**env, **extra}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True) for name, (extra, argv, run) in FORMS.items()}
  results = {}
  for name, run in runs.items():
    stdout, stderr = run.communicate(timeout=timeout)
    lines = stdout.strip().splitlines()
    results[name] = {
        "returncode": run.returncode,
        "report": json.loads(lines[-1]) if lines else None,
        "stderr": [line for line in stderr.splitlines() if line.strip()][-3:]}
  return results


def main():
  from docs import needs  # pylint: disable=g-import-not-at-top
  needs.show((("fetch", fetches()), ("scan", scan_carries()),
              ("nested", nested_pmaps()), ("escape hatch", escape_hatch())))


if __name__ == "__main__":
  main()
