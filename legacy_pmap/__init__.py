"""The classic programs as written for `jax.pmap` (the backend users leave)."""
