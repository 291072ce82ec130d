#!/usr/bin/env bash
# Installs everything the tests need into ./.venv, then runs the whole suite.
# Arguments go to pytest: the fast tier (no Ray, Spark, server processes or crash
# tests; under 2 minutes on 2 cores) is  bash scripts/test.sh -m "not slow and not crash"
# (tests/README.md). setup.sh installs only when something changed;
# MQSTORE_SKIP_SETUP=1 skips it (./.venv must be complete).
#
# With no arguments (the README's and CI's full suite) it runs every test in three
# pytest runs, so that what cannot disturb another test shares the cores:
#   1. tests/unit, tests/kernels, tests/integration, all of them (slow and crash too):
#      in-process or their own subprocesses, no Ray, Spark or server (tests/conftest.py's
#      no_clusters guard), so two workers (pytest-xdist, one per core);
#   2. every other test that is neither slow nor crash, and the doctests: two workers
#      (the fast tier runs them so every day), every hypothesis example;
#   3. the slow and crash tests that start Ray, Spark or servers: one process, one at a
#      time, as before.
# Every run goes ahead if one fails; the exit status is the first failure's.
# MQSTORE_TEST_WORKERS=0 runs 1 and 2 in one process too.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${MQSTORE_SKIP_SETUP:-0}" != 1 ]]; then
  bash scripts/setup.sh
fi
# pytest keeps the test modules it rewrites (assert introspection) in __pycache__ only
# where bytecode may be written: with PYTHONDONTWRITEBYTECODE set, every run and every
# xdist worker parsed and rewrote all test modules again (~10 s of CPU per process,
# two thirds of collecting the fast tier).
unset PYTHONDONTWRITEBYTECODE
if [[ $# -gt 0 ]]; then
  exec .venv/bin/python -m pytest "$@"
fi
workers=(-n "${MQSTORE_TEST_WORKERS:-2}" --dist loadfile)
in_process=(tests/unit tests/kernels tests/integration)
others=(tests/services tests/equivalence tests/rocketmq tests/jobs mqstore services)
rc=0
run() {
  echo "== pytest $*" >&2
  local code=0
  .venv/bin/python -m pytest "$@" || code=$?
  # 5: nothing selected (a run whose tests all moved elsewhere) is not a failure
  if [[ $code -ne 0 && $code -ne 5 && $rc -eq 0 ]]; then rc=$code; fi
}
run "${workers[@]}" "${in_process[@]}"
# "not (slow or crash)" selects the fast tier's tests but is not its expression
# (tests/tiers.py): every hypothesis example runs
run "${workers[@]}" -m "not (slow or crash)" "${others[@]}"
run -m "slow or crash" "${others[@]}"
exit "$rc"
