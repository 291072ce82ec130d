#!/usr/bin/env bash
# Generate the Python stubs of proto/mqstore/v1/*.proto into mqstore/rpc/v1/.
#
# The generated modules are committed; tests/services/test_proto_stubs.py checks
# that running this again changes nothing (so edit the .proto, then run this).
# Usage: bash scripts/gen_proto.sh [OUT_DIR]   (default: mqstore/rpc/v1)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
OUT="${1:-mqstore/rpc/v1}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PY" -m grpc_tools.protoc -Iproto --python_out="$TMP" --pyi_out="$TMP" --grpc_python_out="$TMP" proto/mqstore/v1/*.proto
mkdir -p "$OUT"
for f in "$TMP"/mqstore/v1/*.py "$TMP"/mqstore/v1/*.pyi; do
  # protoc writes imports for the proto path (mqstore.v1); the modules live in mqstore.rpc.v1.
  sed -e 's/^from mqstore\.v1 import /from mqstore.rpc.v1 import /' "$f" > "$OUT/$(basename "$f")"
done
