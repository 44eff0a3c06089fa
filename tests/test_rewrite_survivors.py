"""The rewrite's behaviours that mutation testing (`python -m
bench.mutation`) found no fast test pinning; bench/mutation_triage.toml
names the mutant each test kills."""
