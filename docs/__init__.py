"""The migration guide, its builder and the examples it quotes.

Run from the repository root as modules: `python -m docs.build_guide`
builds docs/MIGRATION.md; `python -m docs.traps`, `python -m docs.errors`
and `python -m docs.idioms` run the examples. The measurement runners and
probes are in `bench`.
"""
