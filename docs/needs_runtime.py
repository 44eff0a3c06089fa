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
# The regions' imports are the guide's page import block
# (docs/page_imports.py), stated once above them; each region keeps one
# blank line between definitions: the guide prints it.
# pylint: disable=reimported,g-import-not-at-top,wrong-import-position
# pylint: disable=ungrouped-imports,g-bad-import-order

import os

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import logging

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P


# region: cheap-fetch
def pmap_fetch(x):  # x: [N, b, d]; the output: a copy per device, [N, d]
  out = jax.pmap(lambda b: jax.lax.psum(b.sum(0), "batch"), "batch")(x)
  # device_get(out) copies all N; out[0] runs an all-reduce; out_axes=None
  # returns one copy but checks nothing (device 0's). Read one shard:
  return np.asarray(out.addressable_shards[0].data[0])

def port_fetch(x, mesh):  # x: [N * b, d]; out_specs=P(): one value, and
  return jax.device_get(jax.jit(jax.shard_map(  # device_get copies one shard
      lambda b: jax.lax.psum(b.sum(0), "data"), mesh=mesh,
      in_specs=P("data"), out_specs=P()))(x))
# endregion


# region: scan-carry-vma
def per_device_sums(mesh):  # x: [N * b], split P("data"); check_vma=True
  def running_sum(block):
    # jnp.zeros(()) alone is a TypeError; or init = jnp.zeros_like(block[0])
    init = jax.lax.pcast(jnp.zeros(()), "data", to="varying")
    total, _ = jax.lax.scan(lambda t, r: (t + r, None), init, block)
    return total[None]
  return jax.jit(jax.shard_map(running_sum, mesh=mesh, in_specs=P("data"),
                               out_specs=P("data")))
# endregion


# region: nested-pmap
def member_mean(b):  # was pmap(pmap(member_mean, "data"), "members")
  return jax.lax.pmean(b.mean(0), "data")[None]  # over "data" only

def ports(members, shards):  # x: [members * shards * b, d]
  mesh = jax.make_mesh((members, shards), ("members", "data"),
                       axis_types=(AxisType.Auto,) * 2)
  flat = jax.shard_map(member_mean, mesh=mesh, out_specs=P("members"),
                       in_specs=P(("members", "data")))  # both axes at once
  inner = lambda b: jax.shard_map(  # the concrete mesh is refused here
      member_mean, mesh=jax.sharding.get_abstract_mesh(), in_specs=P("data"),
      out_specs=P(), axis_names={"data"})(b)
  nested = jax.shard_map(inner, mesh=mesh, in_specs=P("members"),
                         out_specs=P("members"), axis_names={"members"})
  smap = jax.smap(jax.smap(member_mean, in_axes=0, out_axes=None,
                           axis_name="data"), in_axes=0, out_axes=0,
                  axis_name="members")  # call it under jax.set_mesh(mesh)
  return mesh, [jax.jit(f) for f in (flat, nested, smap)]
# endregion


# region: escape-hatch
def check_pmap_runtime():  # at start-up: "original" or "shard_map"
  if ("JAX_PMAP_SHMAP_MERGE" in os.environ  # set, and ignored: jax 0.10
      and "jax_pmap_shmap_merge" not in jax.config.values):  # has no switch
    logging.warning("JAX_PMAP_SHMAP_MERGE is ignored: pmap runs on shard_map")
  out = jax.pmap(lambda x: x, devices=jax.local_devices()[:1])(np.zeros(1))
  original = type(out.sharding).__name__ == "PmapSharding"  # jax <= 0.9
  return "original" if original else "shard_map"
# endregion


# The regions on the same numbers (8 devices), for tests/test_needs.py.
import json
import subprocess
import sys

import flax.jax_utils
from jax import lax
from jax.sharding import NamedSharding

from docs.needs import outcome
from docs.traps_common import N, auto_mesh


def fetches(b=2, d=3):
  """One copy fetched from pmap's and the port's replicated results."""
  x = np.arange(N * b * d, dtype=np.float32).reshape(N * b, d)
  stacked_x = x.reshape(N, b, d)
  mesh = auto_mesh()
  column_sums = lambda a: lax.psum(a.sum(0), "batch")
  stacked = jax.pmap(column_sums, axis_name="batch")(stacked_x)
  single = jax.pmap(column_sums, axis_name="batch", out_axes=None)(stacked_x)
  unreduced = jax.pmap(lambda a: a.sum(0), axis_name="batch",
                       out_axes=None)(stacked_x)
  port = jax.jit(jax.shard_map(lambda a: lax.psum(a.sum(0), "data"),
                               mesh=mesh, in_specs=P("data"),
                               out_specs=P()))(x)
  return {"expected": x.sum(0),
          "pmap": (pmap_fetch(stacked_x), np.asarray(single)),
          "port": (port_fetch(jax.device_put(
              x, NamedSharding(mesh, P("data"))), mesh),
                   np.asarray(port.addressable_shards[0].data)),
          "unreplicate": np.asarray(flax.jax_utils.unreplicate(stacked)),
          "device_get rows": jax.device_get(stacked).shape,
          "shard 0 rows": stacked.addressable_shards[0].data.shape,
          "port fully replicated": port.is_fully_replicated,
          "unreduced, out_axes=None": np.asarray(unreduced),
          "unreduced copies": [np.asarray(s.data)
                               for s in unreduced.addressable_shards],
          "device 0's rows": x[:b].sum(0)}


def carry_sums(init, mesh, check_vma=True):
  """The region's running sums, the carry started from `init(block)`."""
  def running_sum(block):
    total, _ = lax.scan(lambda t, r: (t + r, None), init(block), block)
    return total[None]
  return jax.jit(jax.shard_map(running_sum, mesh=mesh, in_specs=P("data"),
                               out_specs=P("data"), check_vma=check_vma))


def replicated_carry_sums(mesh, check_vma=True):
  """A `jnp.zeros(())` carry: a TypeError under check_vma=True."""
  return carry_sums(lambda block: jnp.zeros(()), mesh, check_vma)


def scan_carries(b=4):
  """The replicated carry (error), pcast, zeros_like and check_vma=False."""
  x = np.arange(N * b, dtype=np.float32)
  mesh = auto_mesh()
  x_on_mesh = jax.device_put(x, NamedSharding(mesh, P("data")))
  zeros_like = carry_sums(lambda block: jnp.zeros_like(block[0]), mesh)
  return {"expected": x.reshape(N, b).sum(1),
          "replicated carry": outcome(replicated_carry_sums(mesh),
                                      x_on_mesh),
          "pcast": np.asarray(per_device_sums(mesh)(x_on_mesh)),
          "zeros_like": np.asarray(zeros_like(x_on_mesh)),
          "check_vma=False": np.asarray(replicated_carry_sums(
              mesh, check_vma=False)(x_on_mesh)),
          "lax.pvary exists": hasattr(lax, "pvary")}


def nested_pmaps(members=2, shards=4, b=3, d=2):
  """The member means four ways: nested pmap (refused), 2-D mesh, nested
  shard_map, nested smap."""
  x = np.arange(members * shards * b * d, dtype=np.float32).reshape(
      members * shards * b, d)
  legacy = jax.pmap(jax.pmap(member_mean, axis_name="data"),
                    axis_name="members")
  mesh, (flat, nested, smap) = ports(members, shards)
  out = {"expected": x.reshape(members, shards * b, d).mean(1),
         "nested pmap": outcome(legacy,
                                x.reshape(members, shards, b, d)),
         "2-D mesh": np.asarray(flat(x)),
         "nested shard_map": np.asarray(nested(x)),
         "nested smap, no set_mesh": outcome(smap, x),
         "jax.smap exists": hasattr(jax, "smap")}
  with jax.set_mesh(mesh):
    out["nested smap"] = np.asarray(smap(x))
  out["nested shard_map, concrete mesh inside"] = outcome(
      jax.jit(jax.shard_map(
          lambda b: jax.shard_map(member_mean, mesh=mesh, in_specs=P("data"),
                                  out_specs=P(), axis_names={"data"})(b),
          mesh=mesh, in_specs=P("members"), out_specs=P("members"),
          axis_names={"members"})), x)
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
