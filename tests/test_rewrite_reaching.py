"""`plan.reaching`'s scoping rules on a reading made by hand (issue 73's
mutation survivors): which bindings of a name a read at a line sees. The
reading is a stand-in for `global_reader.Reader` holding only what
`reaching` reads: each scope's bindings, enclosing scope, loops and blocks
that may not run, and where a nested function is defined."""

import types

from compare._src.rewrite.plan import reaching


def _bound(*lines):
  """Bindings, each one line long, at `lines`."""
  return [types.SimpleNamespace(line=line, end=line) for line in lines]


def _reader(assigns, parents=None, loops=None, suites=None, def_line=None):
  return types.SimpleNamespace(
      assigns=assigns, params={}, parents=parents or {}, loops=loops or {},
      suites=suites or {}, def_line_in=lambda own, scope: def_line)


def test_a_functions_read_of_a_module_name_sees_the_last_binding_before_it():
  # The read's line, not the function's def line, decides.
  x2, x5 = _bound(2, 5)
  r = _reader({("<module>", "x"): [x2, x5]}, parents={"f": "<module>"},
              def_line=3)
  assert reaching.reaching(r, "f", "x", 7) == ("<module>", [x5])


def test_a_closure_sees_the_bindings_reaching_its_def_and_any_later():
  a2, a3, a6 = _bound(2, 3, 6)
  r = _reader({("outer", "x"): [a2, a3, a6]},
              parents={"inner": "outer", "outer": "<module>"}, def_line=4)
  assert reaching.reaching(r, "inner", "x", 5) == ("outer", [a3, a6])


def test_a_read_in_a_loop_before_any_binding_sees_the_loops_last_one():
  a4, a5 = _bound(4, 5)
  r = _reader({("f", "x"): [a4, a5]}, loops={"f": [(2, 6)]})
  assert reaching.reaching(r, "f", "x", 3) == ("f", [a5])


def test_only_the_bindings_in_blocks_that_may_not_run_leave_earlier_ones():
  a1, a2, a3, a4 = _bound(1, 2, 3, 4)
  r = _reader({("f", "x"): [a1, a2, a3, a4]}, suites={"f": [(4, 4)]})
  assert reaching.reaching(r, "f", "x", 9) == ("f", [a3, a4])


def test_a_loops_later_binding_reaches_its_earlier_read():
  a1, a5, a9 = _bound(1, 5, 9)
  r = _reader({("f", "x"): [a1, a5, a9]}, loops={"f": [(3, 6)]})
  assert reaching.reaching(r, "f", "x", 4) == ("f", [a1, a5])
