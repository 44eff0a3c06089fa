"""The same programs on `jax.sharding` meshes and `jax.shard_map`."""
