"""Stage 2, plan: what was read in, each step's layout out.

In: the reading of `read` (steps, calls, bindings, reads) and, with
`--prove`, the layout the team's Port declares. Out: each pmapped step's
arguments and outputs as replicated (`R`), a global batch (`B`) or pmap's
stacked layout (`S`), the reads to replace, and a `Blocker` for each place
the global step cannot take (`global_layouts`); a step the file never
calls given the Port's layout (`global_declared`).
"""
