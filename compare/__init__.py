"""Runs the twin backends side by side and proves they compute the same numbers.

`python -m compare --strategy data_parallel|ensemble|accumulation`.
"""
