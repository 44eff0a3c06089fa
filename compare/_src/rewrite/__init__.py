"""`python -m compare.rewrite`: a pmap program in, its port and a report out.

The rewrite runs in stages, each a package or module whose docstring says
what comes in and what goes out (LibCST's codemods and `tf_upgrade_v2` are
the models: one transform per visitor, every change a typed record):

- `records`, `layouts`, `rewrite_helpers`: what every stage shares: the
  typed `Finding` (a `Kind` and a `Subject`), `Port`, `Rewrite` and
  `RewriteError`; the layouts' names (`R`, `B`, `S`, `Blocker`,
  `StepLayout`); the first step's helpers' source.
- `read/`: the source in, what it says out (pmap's uses and arguments, the
  program's steps, calls, bindings and reads); nothing written.
- `plan/`: the reading in, each step's layout out (`global_layouts`), or
  the places the global step cannot take; each step's specs
  (`step_specs`); the Port's declared layout.
- `write/`: the module and its plan in, the written code and its findings
  out: one writer per step, each a LibCST transform composed of parts
  (the pmaps' sites, the placements), none built on another: the first
  step (`rewrite_pmap`), the global step (`global_rewriter`: without
  helpers, `global_plain`, or with them, `global_step`), the tidying;
  each written port recorded as a `Port` (its bound name, the names its
  function names, its axes and specs).
- `pipeline`: the stages in order for one source: `rewrite_source` (the
  first step), `rewrite_global_source` (both steps, `--global`).
- `report`: every file's `Rewrite` in, the report's lines and counts out.
- `proof/`: the written port and the writer's records of it in,
  `compare.prove`'s verdict out (`--prove`); nothing of the written text
  is parsed for the records' facts.
- `rewrite_cli`: the command line: files in, files and the report out.

Each stage imports only those before it (tests/test_rewrite_stages.py).
"""
