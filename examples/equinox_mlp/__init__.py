"""An equinox program: `eqx.filter_pmap` before, `eqx.filter_jit` over
`jax.shard_map` after; its state the model's arrays and optax's state."""
