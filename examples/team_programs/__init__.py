"""Team programs written the way migrating teams write them, not to fit the
harness: each a pmap program, its port and realistic wrong ports, proved
through the public API only (tests/test_team_programs.py)."""
