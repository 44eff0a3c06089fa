"""An optax program holding `(params, opt_state)` as a tuple, pmap'd the new
way (the state broadcast, `in_axes=None`), and its `jit` port."""
