"""Stage 1, read: a pmap program's source in, what it says out.

Nothing here writes code. In: the source text, parsed with LibCST. Out:
pmap's uses and aliases (`names`), each pmap's arguments read as literals
(`pmap_arguments`), the calls that keep or were removed with pmap's stacked
layout (`stacked_calls`), a first step's output read back into its program
(`first_step_undone`), another library's pmap in a file with no
jax.pmap (`other_pmaps`: named; flax NNX's and equinox's read by
`other_pmap_args` for their port), the functions
holding a pmap that nothing calls (`global_uncalled`), and, for the global step, every step, call, binding
and read of the program (`global_reader` over `global_scopes`,
`global_idioms`, `global_calls`, `global_handed` and `pipeline_reads`:
the batches the program's own pipeline makes, `pipeline_batches`), which
`plan` answers.
"""
