"""Debugging a sharding: what each tool jax ships shows for one array.

The region is the guide's (docs/MIGRATION.md, "Debugging a sharding"); it
runs after the page's import block (docs/page_imports.py). `show()` runs
it and returns what it printed, for `tests/test_debugging.py`; it needs 8
devices (`python -m docs.debugging` emulates them on CPU).
"""
# pylint: disable=g-import-not-at-top,wrong-import-position

import contextlib
import io
import os

if __name__ == "__main__":
  # 8 emulated CPU devices, set before jax is imported.
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_force_host_platform_device_count=8")

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

N = 8  # the devices the guide's snippets spread over


def show() -> str:
  """Runs the region; returns what it printed."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    # region: debug-sharding
    mesh = jax.make_mesh((N,), ("data",), axis_types=(AxisType.Explicit,))
    x = jax.device_put(np.ones((2 * N, 4)), NamedSharding(mesh, P("data")))
    print(jax.typeof(x))  # float32[16@data,4]: an Explicit axis is in the type
    print(x.sharding.spec, x.addressable_shards[0].data.shape)  # per device
    jax.debug.visualize_array_sharding(x)  # which device holds which rows

    @jax.jit
    def column_sums(a):
      jax.debug.inspect_array_sharding(a, callback=print)  # as jit compiles it
      return a.sum(0)

    hlo = column_sums.lower(x).compile().as_text()  # the program that runs
    print({op: hlo.count(f" {op}(") for op in ("all-reduce", "all-gather")})
    # endregion
  return out.getvalue()


if __name__ == "__main__":
  print(show())
