"""Stage 5, prove: the written port in, a verdict out.

`--prove PKG.MODULE:NAME` (`prove_flag`) loads the team's `compare.Port`
of the original program and proves the written step against its pmap step
with `compare.prove` (`rewrite_proof`); a step made under `if __name__ ==
'__main__':` is proved by running both files as scripts (`script_proof`).
The proof reads what the writer recorded (`records.Rewrite`: each port's
name, the names its function names, its axes), not the written text:
`local_port` finds a pmap made inside a function by its record,
`on_port_layout` puts the written step on the Port's layout, and
`rewrite_cost` shows what each step compiles to.
"""
