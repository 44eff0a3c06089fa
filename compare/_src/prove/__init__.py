"""`compare.prove` and `python -m compare`: two programs, one verdict.

What flows through it: a program (one of our strategies, or a team's
`Port`, read by `port`, `port_steps` and `adapt`) becomes runs
(`port_runs`); `runner` trains every run over the same batches, in
lockstep from one shared state (`lockstep`, placed in each run's layout
by `placement`); `verdicts`, `leaf_bands` and
`equivalence` judge each step against its one-step band (at the
precision `matmul_precision` sets); `proof` assembles the verdict, which
`report`, `plots` and `progress` show. `sweep` and `switch` rerun it over
device counts and across a checkpoint.
"""
