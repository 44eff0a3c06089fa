"""Programs shared by both backends: models, data, losses, metrics, configs.

Nothing here knows about devices: no `jax.sharding`, no collectives, no
branching on a backend. Metrics return sums and counts so that each backend
can reduce them its own way.
"""
