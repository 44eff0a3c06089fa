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
      -c constraints/original-pmap-runtime.txt -e ".[test]"
}
part install make_venv || exit 1
. .venv-original/bin/activate
python -c 'import jax, flax; print("jax", jax.__version__, "flax", flax.__version__)'

export JAX_PMAP_SHMAP_MERGE=0 SHARDPORT_EXPECT_ORIGINAL_RUNTIME=1
part tests python -m pytest -p no:cacheprovider \
  tests/test_ensemble.py tests/test_data_parallel.py \
  tests/test_accumulation.py tests/test_equivalence.py

out=$(mktemp -d)
part "compare data_parallel" python -m compare --strategy data_parallel \
  --steps 3 --windows 2 --json "$out/data_parallel.json"
part "compare ensemble" python -m compare --strategy ensemble \
  --epochs 1 --windows 2 --json "$out/ensemble.json"
part "compare accumulation" python -m compare --strategy accumulation \
  --steps 3 --windows 2 --json "$out/accumulation.json"

# The assertions, on the reports just written.
SHARDPORT_ORIGINAL_RUNTIME_JSON=$out part assertions \
  python -m pytest -p no:cacheprovider -rA tests/test_original_runtime.py
rm -rf "$out"
echo "== original runtime: all parts: $SECONDS s, exit $status"
exit "$status"
