"""`python -m compare.rewrite`: a pmap program in, its port and a report out.

What flows through it: a source file is parsed with LibCST
(`rewrite_file`), every `jax.pmap` is rewritten into the first step's
`jax.jit(jax.shard_map(...))` that keeps pmap's stacked layout
(`rewrite_pmap`, over `pmap_arguments` and `stacked_calls`); `--global`
then reads every value the steps take (`global_reader`, `global_scopes`,
`global_calls`, `global_handed`, `global_idioms`, answered by
`global_layouts`) and writes the second step on global arrays
(`rewrite_global`): as a JAX engineer writes it where it can, one
module-level mesh and `jax.jit(jax.shard_map(...))`, no helper
(`global_plain`, `global_written`), else with the first step's helpers;
`global_declared` is the layout a team's Port declares, `global_tidy`
names what the port left dead or stale, and `global_uncalled` sets aside
a pmap in a function the file never calls. `rewrite_cli` runs it on
files; `rewrite_proof` and `rewrite_cost` prove the written port with
`compare.prove` and show what it compiles to.
"""
