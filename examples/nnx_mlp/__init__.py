"""A Flax NNX program: `nnx.pmap` before, `nnx.jit(nnx.shard_map(...))`
after, its state the `nnx.State` of `nnx.split((model, optimizer))`."""
