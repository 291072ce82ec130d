#!/usr/bin/env bash
# Entrypoint of `ray job submit` for `mqstore serve` on a running Ray cluster:
#
#   ray job submit --address http://HEAD:8265 \
#       --runtime-env-json '{"env_vars": {"MQSTORE_SHARDS": "2", "RAY_JOB_STOP_WAIT_TIME_S": "120"}}' \
#       -- bash /opt/mqstore/src/deploy/serve-job.sh [more `mqstore serve` options]
#
# The job's driver is this script on the head node: it joins the cluster
# (--address auto), places shard i on the node offering the custom resource
# mqstore_shard_i (--placement resource), runs the front on the head and serves
# until `ray job stop` (SIGTERM: every store is closed cleanly; Ray sends SIGKILL
# after RAY_JOB_STOP_WAIT_TIME_S, 3 s by default, so raise it as above).
# Settings (environment, with defaults):
#   MQSTORE_PYTHON        /opt/mqstore/venv/bin/python   the interpreter with mqstore (an absolute path:
#                                                       a job's PATH is not the venv's)
#   MQSTORE_STORE         /var/lib/mqstore               store root on every node's local disk (DIR/shard-i)
#   MQSTORE_SHARDS        1
#   MQSTORE_PLACEMENT     resource                       or node (every shard on the head)
#   MQSTORE_HOST          0.0.0.0                        the front binds here (internal servers bind to
#                                                       their node's address; a non-loopback front needs
#                                                       MQSTORE_ACL or MQSTORE_ALLOW_ANONYMOUS=1)
#   MQSTORE_PORT          8080                           the front (public API)
#   MQSTORE_METRICS_PORT  9464                           the front's Prometheus metrics (0: none)
#   MQSTORE_ROCKETMQ_PORT 8081                           the front's RocketMQ 5 protocol for the official clients (0: none)
#   MQSTORE_FLUSH         sync
#   MQSTORE_TLS_DIR       (none)                         a directory with tls.crt and tls.key (a Kubernetes TLS
#                                                       secret's layout): the front speaks TLS only
#   MQSTORE_ACL           (none)                         the front's users and permissions (`serve --acl`); on
#                                                       Kubernetes kuberay.yaml mounts the secret mqstore-acl there
#   MQSTORE_ALLOW_ANONYMOUS  0                           1: serve a non-loopback front without an ACL
#   MQSTORE_DRY_RUN       1: print the command line (one argument per line) instead of running it
set -euo pipefail

PY="${MQSTORE_PYTHON:-/opt/mqstore/venv/bin/python}"
args=(
  -m mqstore.cli.main serve
  --address auto
  --store "${MQSTORE_STORE:-/var/lib/mqstore}"
  --shards "${MQSTORE_SHARDS:-1}"
  --placement "${MQSTORE_PLACEMENT:-resource}"
  --host "${MQSTORE_HOST:-0.0.0.0}"
  --port "${MQSTORE_PORT:-8080}"
  --metrics-port "${MQSTORE_METRICS_PORT:-9464}"
  --rocketmq-port "${MQSTORE_ROCKETMQ_PORT:-8081}"
  --flush "${MQSTORE_FLUSH:-sync}"
)
if [[ -n "${MQSTORE_TLS_DIR:-}" && -f "$MQSTORE_TLS_DIR/tls.crt" && -f "$MQSTORE_TLS_DIR/tls.key" ]]; then
  args+=(--tls-cert "$MQSTORE_TLS_DIR/tls.crt" --tls-key "$MQSTORE_TLS_DIR/tls.key")
fi
if [[ -n "${MQSTORE_ACL:-}" && -f "$MQSTORE_ACL" ]]; then
  args+=(--acl "$MQSTORE_ACL")
fi
if [[ "${MQSTORE_ALLOW_ANONYMOUS:-0}" == 1 ]]; then
  args+=(--allow-anonymous)
fi
args+=("$@")

if [[ "${MQSTORE_DRY_RUN:-0}" == 1 ]]; then
  printf '%s\n' "$PY" "${args[@]}"
  exit 0
fi
if [[ ! -x "$PY" ]]; then
  echo "serve-job.sh: no interpreter at $PY (set MQSTORE_PYTHON to the python that has mqstore)" >&2
  exit 1
fi
exec "$PY" "${args[@]}"
