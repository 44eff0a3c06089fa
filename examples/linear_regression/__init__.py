"""The JAX pmap tutorial's linear regression, as the tutorial writes it, and
its port: a `Params` NamedTuple state and `update(params, xs, ys)`."""
