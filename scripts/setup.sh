#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs mqstore with its test extras into it.
# Sourced by run.sh and test.sh, so each of them works on a fresh machine.
#
# Installs only when something the install depends on changed: a stamp in the venv
# holds a hash of pyproject.toml, setup.py, the compiled kernels' sources (.pyx, .pxd,
# .h) and the .proto files; when it matches and the venv is complete (the mqstore,
# pytest and ruff commands, every kernel built), pip is not run (a second run.sh or
# test.sh starts in seconds, not a minute). MQSTORE_FORCE_SETUP=1 installs anyway;
# MQSTORE_SKIP_SETUP=1 (read by run.sh and test.sh) skips this script altogether.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/.mqstore-setup-stamp

inputs_hash() {
  {
    .venv/bin/python -c 'import sys; print(sys.version)'
    find pyproject.toml setup.py mqstore/kernels proto -type f \
      \( -name pyproject.toml -o -name setup.py -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' -o -name '*.proto' \) \
      -print | LC_ALL=C sort | xargs sha256sum
  } | sha256sum | cut -d' ' -f1
}

venv_complete() {
  local f
  for f in .venv/bin/mqstore .venv/bin/pytest .venv/bin/ruff; do
    [ -x "$f" ] || return 1
  done
  for f in mqstore/kernels/*.pyx; do
    compgen -G "${f%.pyx}.*.so" >/dev/null || return 1
  done
}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
want=$(inputs_hash)
if [ "${MQSTORE_FORCE_SETUP:-0}" != 1 ] && venv_complete && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
rm -f "$STAMP"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"
echo "$want" > "$STAMP"
