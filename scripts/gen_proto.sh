#!/usr/bin/env bash
# Generate the Python stubs of proto/mqstore/v1/*.proto into mqstore/rpc/v1/ and of
# proto/mqstore/rocketmq/v2/*.proto (RocketMQ 5's messages) into mqstore/rpc/rocketmq_v2/.
#
# The generated modules are committed; tests/services/test_proto_stubs.py checks
# that running this again changes nothing (so edit the .proto, then run this).
# Usage: bash scripts/gen_proto.sh [V1_OUT_DIR [ROCKETMQ_OUT_DIR]]
#        (defaults: mqstore/rpc/v1 mqstore/rpc/rocketmq_v2)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
OUT="${1:-mqstore/rpc/v1}"
OUT_RMQ="${2:-mqstore/rpc/rocketmq_v2}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PY" -m grpc_tools.protoc -Iproto --python_out="$TMP" --pyi_out="$TMP" --grpc_python_out="$TMP" proto/mqstore/v1/*.proto
# No services are declared in the RocketMQ file (services/rocketmq registers the methods), so no *_grpc.py.
"$PY" -m grpc_tools.protoc -Iproto --python_out="$TMP" --pyi_out="$TMP" proto/mqstore/rocketmq/v2/*.proto
mkdir -p "$OUT" "$OUT_RMQ"
for f in "$TMP"/mqstore/v1/*.py "$TMP"/mqstore/v1/*.pyi; do
  # protoc writes imports for the proto path (mqstore.v1); the modules live in mqstore.rpc.v1.
  sed -e 's/^from mqstore\.v1 import /from mqstore.rpc.v1 import /' "$f" > "$OUT/$(basename "$f")"
done
cp "$TMP"/mqstore/rocketmq/v2/*.py "$TMP"/mqstore/rocketmq/v2/*.pyi "$OUT_RMQ/"
