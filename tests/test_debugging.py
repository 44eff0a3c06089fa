"""The guide's "Debugging a sharding" region prints what its comments say."""

from docs import debugging


def test_each_tool_shows_the_rows_split_over_the_devices():
  lines = debugging.show().splitlines()
  assert lines[0] == "float32[16@data,4]"  # jax.typeof: the Explicit axis
  assert lines[1] == "P('data',) (2, 4)"  # the spec, one device's block
  assert sum("CPU " in line for line in lines) == 8  # visualize: a row each
  inspected = next(line for line in lines if line.startswith("NamedSharding"))
  assert "spec=P('data',)" in inspected  # what jit compiled the input as
  # A sum over the split rows: one all-reduce, nothing gathered.
  assert lines[-1] == "{'all-reduce': 1, 'all-gather': 0}"
