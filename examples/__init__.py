"""Example team programs written for jax.pmap, each beside its port."""
