#!/usr/bin/env bash
# Issue 26 item 5: served sends spread over many topics against one topic. Starts
# `mqstore serve` (one shard, --flush async, 256 MiB segments) on a fresh store per
# topic count, waits for its ready line, then runs `bench append --server` of MESSAGES
# messages (128 B, batches of 1,000, 4 producers) in each shape (round-robin, per-topic),
# PASSES passes each (default 2: pass 1 cold, the next warm), with every server process's CPU per
# message (--serve-pid) and the dispatch lag probed meanwhile (--probe-lag).
# One JSON line per run: {"bench":"served_send","topics":T,"shape":S,"result":{...}}.
# Usage: bash bench/served-topics.sh [DIR] [TOPIC COUNTS...]   (default /tmp/served-topics; wiped)
#   MESSAGES=1000000 PASSES=2 PRODUCERS=4 SHAPES="round-robin per-topic" MQ=.venv/bin/mqstore SETTLE_SECONDS=5
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQ:-.venv/bin/mqstore}
DIR=${1:-/tmp/served-topics}
shift || true
COUNTS=${*:-1 10000}
MESSAGES=${MESSAGES:-1000000}
PRODUCERS=${PRODUCERS:-4}
PASSES=${PASSES:-2}
SHAPES=${SHAPES:-round-robin per-topic}
SETTLE_SECONDS=${SETTLE_SECONDS:-5}
ulimit -n 1024
serve_pid=

stop_serve() {  # SIGTERM to serve alone (Ray's processes close the stores), then its group
  [[ -n $serve_pid ]] || return 0
  kill -TERM "$serve_pid" 2>/dev/null || true
  for _ in $(seq 1200); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$serve_pid" 2>/dev/null || true
  wait "$serve_pid" 2>/dev/null || true
  serve_pid=
}
trap 'stop_serve; rm -rf "$DIR"' EXIT
trap 'exit 130' INT TERM

start_serve() {  # sets serve_pid and front
  rm -rf "$DIR"
  mkdir -p "$DIR"
  setsid "$MQ" serve --store "$DIR/store" --port 0 --rocketmq-port 0 --flush async --metrics-port 0 \
    --segment-bytes 268435456 >"$DIR/ready" 2>"$DIR/serve.log" &
  serve_pid=$!
  for _ in $(seq 1800); do
    [[ -s $DIR/ready ]] && break
    kill -0 "$serve_pid" 2>/dev/null || { echo "serve exited before ready:" >&2; tail -n 30 "$DIR/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  front=$(sed -n 's/.*"front": *"\([^"]*\)".*/\1/p' "$DIR/ready" | head -n 1)
  [[ -n $front ]] || { echo "no ready line from serve within 180 s" >&2; tail -n 30 "$DIR/serve.log" >&2; exit 1; }
  sleep "$SETTLE_SECONDS"
}

for t in $COUNTS; do
  for shape in $SHAPES; do
    start_serve
    out=$("$MQ" bench append --server "$front" --messages "$MESSAGES" --batch 1000 --producers "$PRODUCERS" \
      --body-size 128 --topics "$t" --shape "$shape" --passes "$PASSES" --probe-lag \
      --serve-pid "$serve_pid" --shard-dir "$DIR/store" 2>/dev/null)
    printf '{"bench":"served_send","topics":%s,"shape":"%s","result":%s}\n' "$t" "$shape" "$(tail -n 1 <<<"$out")"
    stop_serve
  done
done
