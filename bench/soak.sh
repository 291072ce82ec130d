#!/usr/bin/env bash
# Soak (issue 16, item 7): `mqstore serve` on a fresh temp store (local Ray, one shard,
# sync flush), then `mqstore bench soak` against it for MINUTES: 4 producers sending
# batches (every acknowledgement in an ack log), 4 consumers pulling every queue, key
# queries, one actor SIGKILLed every KILL_EVERY minutes in turn (commitlog,
# dispatcher, consume-queue builder, index builder, front; Ray restarts each), the RSS
# of every process of the deployment sampled every 30 s. At the end the soak checks
# every acknowledged message against the pulls, stops serve (SIGTERM: every store
# closed) and verifies the store. Prints a row per minute on stderr as it goes, then
# the table, the RSS per process and the JSON summary (last line); exits 1 if anything
# acknowledged was lost, verify found an error or a killed actor did not come back.
#
# Usage: bash bench/soak.sh [more `mqstore bench soak` options, e.g. --rate 20000]
# Env: MQSTORE (default `mqstore` on PATH, e.g. MQSTORE=.venv/bin/mqstore), MINUTES (20),
#      KILL_EVERY (4, minutes; the first kill half an interval in), FLUSH (sync),
#      PORT (the front's; default a free one: fixed, as a killed front comes back on it),
#      OUT (also write the JSON summary to this file), TMPDIR. The temp directory
#      (store, ack log, serve's log) is removed on success and kept on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQSTORE:-mqstore}
MINUTES=${MINUTES:-20}
KILL_EVERY=${KILL_EVERY:-4}
FLUSH=${FLUSH:-sync}
PORT=${PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}

command -v "$MQ" >/dev/null 2>&1 || { echo "bench/soak.sh: $MQ not found (set MQSTORE=/path/to/mqstore)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mqstore-soak.XXXXXX")
serve_pid=
status=1

alive() {  # running, not a zombie waiting to be reaped
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $state != Z* ]]
}

cleanup() {
  if [[ -n $serve_pid ]]; then
    if alive "$serve_pid"; then  # the soak did not get to stop it
      kill -TERM "$serve_pid" 2>/dev/null || true  # serve alone: Ray's processes must outlive it to close the stores
      for _ in $(seq 1200); do alive "$serve_pid" || break; sleep 0.1; done
    fi
    kill -KILL -- "-$serve_pid" 2>/dev/null || true  # whatever of Ray is left in its group
    wait "$serve_pid" 2>/dev/null || true
  fi
  if [[ $status == 0 ]]; then
    rm -rf "$work"
  else
    echo "bench/soak.sh: kept $work (store, ack log, serve.log)" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# setsid: serve and Ray's processes in their own group, away from a Ctrl-C of this script
setsid "$MQ" serve --store "$work/store" --port "$PORT" --flush "$FLUSH" --metrics-port 0 \
  --actor-log-level warning >"$work/ready" 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 1800); do
  [[ -s $work/ready ]] && break
  if ! alive "$serve_pid"; then
    echo "bench/soak.sh: mqstore serve exited before ready; its log ends:" >&2
    tail -n 30 "$work/serve.log" >&2
    exit 1
  fi
  sleep 0.1
done
front=$(sed -n 's/.*"front": *"\([^"]*\)".*/\1/p' "$work/ready" | head -n 1)
[[ -n $front ]] || { echo "bench/soak.sh: no ready line from serve within 180 s" >&2; tail -n 30 "$work/serve.log" >&2; exit 1; }
sleep 5  # Ray settles

echo "bench/soak.sh: serve $serve_pid on $front, store $work/store; $MINUTES min, a kill every $KILL_EVERY min; $(uptime | sed 's/.*load average/load average/')" >&2
set +e
"$MQ" bench soak --server "$front" --store "$work/store" --serve-pid "$serve_pid" \
  --minutes "$MINUTES" --kill-every "$KILL_EVERY" --ack-log "$work/acks.jsonl" ${OUT:+--out "$OUT"} "$@"
status=$?
set -e
exit "$status"  # cleanup: serve (stopped by the soak, or now), the temp directory
