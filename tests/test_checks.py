"""`compare.checks`: the public checks of the appendix's "prove a port of
your own" steps, from public names only."""

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from compare import checks


def test_compare_trees_says_bitwise_close_or_differ_and_names_the_leaf():
  tol = checks.Tolerance(rtol=1e-6, atol=1e-7, reason="a test")
  a = {"w": np.arange(1.0, 5.0, dtype=np.float32), "b": np.ones(2, "f4")}
  assert checks.compare_trees(a, a, tol)["verdict"] == "bitwise"
  nudged = {**a, "w": np.nextafter(a["w"], np.float32(9))}
  found = checks.compare_trees(nudged, a, tol)
  assert found["verdict"] == "close" and found["max_ulp"] == 1
  wrong = {**a, "b": a["b"] * 1.01}  # negative control: 1% off
  found = checks.compare_trees(wrong, a, tol)
  assert found["verdict"] == "differ" and "b" in found["worst"]


def test_collectives_counted_as_run_and_as_written_and_memory_read():
  mesh = jax.make_mesh((8,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  def body(x):
    return jax.lax.fori_loop(0, 3, lambda _, c: jax.lax.psum(c, "data") / 8,
                             x)
  step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"),
                               out_specs=P("data"), check_vma=False))
  compiled = step.lower(np.ones(16, np.float32)).compile()
  text = compiled.as_text()
  assert checks.count_collectives(text)["all-reduce"] == 1  # written once
  assert checks.collectives_executed(text)["all-reduce"] == 3  # run thrice
  memory = checks.memory(compiled)
  assert set(memory) == {"temp_bytes", "argument_bytes", "output_bytes",
                         "alias_bytes"}
  assert memory["argument_bytes"] > 0
