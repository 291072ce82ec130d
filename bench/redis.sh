#!/usr/bin/env bash
# Redis Streams yardstick for the services goals (issue 4): XADD throughput of a private
# redis-server with AOF at `appendfsync everysec` (compare with `mqstore serve --flush
# async`) and `appendfsync always` (compare with --flush sync). Prints one JSON line per
# durability: {"bench":"redis_xadd_everysec"|"redis_xadd_always","result":{msgs_per_s,...}}.
#
# Workload: XADD of one 128-byte field value, pipelined 1000 deep (-P 1000, as our
# batches of 1000), 4 clients (-c 4, as our 4 producers): redis-server is single
# threaded, so 4 connections keep it busy while one pipeline is in flight, and with
# `always` one fsync (per event-loop turn) covers whatever the clients sent meanwhile,
# like our group commit. redis-benchmark's single client thread takes the other core.
# No RDB snapshots (--save ''), no AOF rewrite (--auto-aof-rewrite-percentage 0): an
# append-only log and nothing else, as our CommitLog; TCP on 127.0.0.1 as our gRPC.
#
# Usage: bash bench/redis.sh          (installs nothing; needs redis-server, redis-cli,
#                                      redis-benchmark: apt-get install -y redis-server redis-tools)
# Env: REDIS_REQUESTS (default 3,000,000 XADDs per durability: ~6 s at everysec and
#      ~10 s at always on the 2-core dev VM), REDIS_CLIENTS (4), REDIS_PIPELINE (1000),
#      TMPDIR (where the data directory goes).
set -euo pipefail

REQUESTS=${REDIS_REQUESTS:-3000000}
CLIENTS=${REDIS_CLIENTS:-4}
PIPELINE=${REDIS_PIPELINE:-1000}

for tool in redis-server redis-cli redis-benchmark; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "bench/redis.sh: $tool not found; install it with: apt-get install -y redis-server redis-tools" >&2
    exit 2
  fi
done

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

work=$(mktemp -d "${TMPDIR:-/tmp}/mqstore-redis.XXXXXX")
redis_pid=
stop_redis() {
  if [[ -n $redis_pid ]] && kill -0 "$redis_pid" 2>/dev/null; then
    kill -TERM "$redis_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$redis_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  redis_pid=
}
cleanup() { stop_redis; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

value=$(head -c 128 /dev/zero | tr '\0' v)  # the 128-byte body

for fsync in everysec always; do
  data="$work/$fsync"
  mkdir -p "$data"
  port=$(free_port)
  redis-server --bind 127.0.0.1 --port "$port" --dir "$data" --save '' \
    --appendonly yes --appendfsync "$fsync" --auto-aof-rewrite-percentage 0 \
    --daemonize no --logfile "$data/redis.log" &
  redis_pid=$!
  for _ in $(seq 100); do
    redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
    kill -0 "$redis_pid" 2>/dev/null || { echo "bench/redis.sh: redis-server exited; see below" >&2; cat "$data/redis.log" >&2; exit 1; }
    sleep 0.1
  done
  # --csv: a header line, then "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
  # "p95_latency_ms","p99_latency_ms","max_latency_ms" (latency per request, pipeline included).
  csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -n "$REQUESTS" -c "$CLIENTS" -P "$PIPELINE" --csv \
          XADD bench '*' body "$value" | tail -n 1)
  length=$(redis-cli -h 127.0.0.1 -p "$port" XLEN bench)
  aof_bytes=$(du -sb "$data/appendonlydir" | cut -f1)
  stop_redis
  IFS=, read -r _ rps avg _ p50 _ p99 _ <<<"${csv//\"/}"
  printf '{"bench":"redis_xadd_%s","result":{"msgs_per_s":%s,"p50_ms":%s,"p99_ms":%s,"avg_ms":%s,"requests":%s,"stream_length":%s,"aof_bytes":%s,"clients":%s,"pipeline":%s,"body_size":128,"appendfsync":"%s"}}\n' \
    "$fsync" "$rps" "$p50" "$p99" "$avg" "$REQUESTS" "$length" "$aof_bytes" "$CLIENTS" "$PIPELINE" "$fsync"
  rm -rf "$data"
done
