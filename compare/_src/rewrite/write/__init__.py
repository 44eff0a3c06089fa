"""Stage 3, write: a module and its plan in, the written code and findings out.

One writer per step, each a LibCST transform composed of parts, none built
on another. The parts: the pmaps' sites (`pmap_sites`: each pmap found,
its arguments read, written with the step's template and recorded as a
`Port`), the placements and reads (`placements`, the pipeline's batches in
`pipeline_written`). The first step (`rewrite_pmap`'s `PmapRewriter`):
every pmap into `jax.jit(jax.shard_map(...))` keeping pmap's stacked
layout, through the helpers (`compare._src.rewrite.rewrite_helpers`). The
global step (`global_rewriter`'s `GlobalRewriter`, run by `global_step`):
as a JAX engineer writes it, one module-level mesh and no helper
(`global_plain`, its templates in `global_written`, a mesh set after a
jax.distributed join in `global_joined`, keyword arguments passed by
position in `global_keywords`, a step running a loop out of jax's check
unchecked in `global_loops`), else with the first step's helpers; then
what it left dead or stale removed or named (`global_tidy`) and the
imports and helpers or mesh at the head (`imports`). A file whose pmaps
are all flax NNX's or equinox's (`nnx.pmap`, `eqx.filter_pmap`) is ported
whole by `other_pmaps_file`, each step by `other_pmaps_write`. Each change
is a typed `Finding` (`compare._src.rewrite.records`).
"""
