"""Stage 5, prove: the written port in, a verdict out.

`--prove PKG.MODULE:NAME` (`prove_flag`) loads the team's `compare.Port`
of the original program and proves the written step against its pmap step
with `compare.prove` (`rewrite_proof`); a step made under `if __name__ ==
'__main__':` is proved by running both files as scripts (`script_proof`).
`written_axes` reads the written step's axes back, `rewrite_cost` shows
what each step compiles to.
"""
