#!/usr/bin/env bash
# The proof against the original pmap runtime (issue 12): jax 0.9.2, the last
# jax whose C++ pmap comes back with JAX_PMAP_SHMAP_MERGE=0, in a second
# virtual environment made from constraints/original-pmap-runtime.txt. Runs
# the equivalence tests there, `python -m compare` for every strategy at
# short lengths, and asserts (tests/test_original_runtime.py) that compare
# reports `pmap_runtime: original` and pmap ~ shard_map bitwise.
# Exits non-zero if any part fails; prints how long each part took.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
part() {  # part NAME COMMAND...: runs it, prints its time, remembers failure
  local name=$1 start=$SECONDS rc=0
  shift
  echo "== original runtime: $name"
  "$@" || rc=$?
  echo "== original runtime: $name: exit $rc, $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

make_venv() {
  python3 -m venv .venv-original &&
    .venv-original/bin/python -m pip install --quiet --upgrade pip &&
    .venv-original/bin/python -m pip install --quiet \
      -c constraints/original-pmap-runtime.txt -e ".[test]" &&
    touch .venv-original/installed
}
# `--install-only`: .ci/run makes the environment while the first
# environment's tests run, then runs the rest.
if [ "${1:-}" = "--install-only" ]; then
  part install make_venv
  exit
fi
if [ ! -e .venv-original/installed ]; then
  part install make_venv || exit 1
fi
. .venv-original/bin/activate
python -c 'import jax, flax; print("jax", jax.__version__, "flax", flax.__version__)'

export JAX_PMAP_SHMAP_MERGE=0 SHARDPORT_EXPECT_ORIGINAL_RUNTIME=1
out=$(mktemp -d)
# One compilation cache for every part (tests/conftest.py leaves a cache the
# caller set alone): the late mistake below compiles what the run before it
# did, all but the port's planted step (docs/jax-facts.md, Compilation
# cache). A size limit turns on its file lock, as in tests/conftest.py.
export JAX_COMPILATION_CACHE_DIR=$out/jax-cache \
  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
  JAX_COMPILATION_CACHE_MAX_SIZE=$((8 << 30))
# The pmap ~ shard_map tests on 8 devices, with their negative controls. The
# whole five files with SHARDPORT_ORIGINAL_FULL=1 (~10 min on 2 cores, and
# ~20 s more for test_ensemble_data.py).
if [ "${SHARDPORT_ORIGINAL_FULL:-0}" = 1 ]; then
  tests=(tests/test_ensemble.py tests/test_data_parallel.py
         tests/test_accumulation.py tests/test_ensemble_data.py
         tests/test_equivalence.py)
else
  # The ensemble's per-member pmap ~ shard_map is `compare ensemble` below,
  # asserted bitwise by tests/test_original_runtime.py, its metrics judged
  # by the verdict; its metrics recomputed in numpy
  # (tests/test_ensemble.py::test_metrics_agree, 32 s here) run in the
  # first part, on the same evaluation code.
  tests=("tests/test_data_parallel.py::test_sgd_canary_one_step[8]"
         tests/test_data_parallel.py::test_negative_control_one_changed_example
         "tests/test_accumulation.py::test_ports_match_reference[4-8]"
         tests/test_accumulation.py::test_pmap_shard_map_check_fails_on_one_changed_label
         # The nested pmap, which only this runtime runs (the shard_map
         # and jit ports against the reference run in the first part).
         tests/test_ensemble_data.py::test_nested_pmap_equals_shard_map_where_it_runs
         tests/test_ensemble_data.py::test_gradient_over_the_wrong_axis_is_caught
         tests/test_equivalence.py)
fi
# The rewrite of jax.device_put_replicated/_sharded, which run here only:
# the original program against its rewrite.
tests+=(tests/test_rewrite_removed_puts.py)
part tests python -m pytest -p no:cacheprovider "${tests[@]}"

# The compares, two at a time (each is mostly single-threaded compiling, and
# CI has 2 cores), the next one started as soon as one ends, longest first.
# Each part writes its own log, printed whole once every part has ended.
queued() {  # queued COMMAND...: runs it in the background, at most 2 at once
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
  njobs=$((njobs + 1))
  { "$@"; echo $? > "$out/log.$njobs.rc"; } > "$out/log.$njobs" 2>&1 &
}
drain() {  # waits for every queued part, prints their logs in order
  wait
  local i
  for ((i = 1; i <= njobs; i++)); do
    cat "$out/log.$i"
    [ "$(cat "$out/log.$i.rc")" = 0 ] || status=1
  done
}
njobs=0
compare_() { python -m compare --windows 0 "$@"; }
queued part "compare accumulation (past the flip at step 10)" compare_ \
  --strategy accumulation --steps 12 --json "$out/accumulation.json"
queued part "compare ensemble_data (the nested pmap)" compare_ \
  --strategy ensemble_data --steps 3 --json "$out/ensemble_data.json"
queued part "compare ensemble" compare_ --strategy ensemble --steps 3 \
  --json "$out/ensemble.json"
# A late mistake (the port's update 1% off at step 2 only) must exit 1. It
# runs after the same run without it, whose compiles it finds in the cache.
late() {
  compare_ --strategy data_parallel --steps 3 \
    --negative-control update-1pct-at:2 --json "$out/data_parallel_late.json"
  [ $? -eq 1 ]
}
data_parallel_then_late() {
  local rc=0
  part "compare data_parallel" compare_ --strategy data_parallel --steps 3 \
    --json "$out/data_parallel.json" || rc=1
  part "compare data_parallel, a late mistake (exit 1 expected)" late || rc=1
  return "$rc"
}
queued data_parallel_then_late
queued part "compare fsdp (the hand-written collectives)" compare_ \
  --strategy fsdp --steps 3 --json "$out/fsdp.json"
queued part "compare --program (a team's port)" compare_ \
  --program examples.resnet.prove:port --steps 5 --json "$out/program.json"
drain

# The assertions, on the reports just written.
# In one process: the assertions read JSON (workers would take longer to
# start than the tests take).
SHARDPORT_ORIGINAL_RUNTIME_JSON=$out part assertions \
  python -m pytest -p no:cacheprovider -n 0 -rA tests/test_original_runtime.py
rm -rf "$out"
echo "== original runtime: all parts: $SECONDS s, exit $status"
exit "$status"
