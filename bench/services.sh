#!/usr/bin/env bash
# Services goals (issues 4 and 16) in one go, over gRPC through `mqstore serve`, next to Redis
# Streams measured in the same run. For --flush async, then --flush sync:
#   - start `mqstore serve` on a fresh temp store (front on a free port, no metrics),
#     wait for its ready line and a few seconds for Ray to settle;
#   - latency: 1 producer, batches of 1 (LATENCY_MESSAGES single-message SendBatch
#     calls on the idle server): p99_ms is the single-message round trip p99;
#   - send: 128 B bodies, batches of 1000, 1 producer then 4 producers, encoded by the
#     client (SendEncoded), then 4 producers sending columns (SendBatch) for comparison;
#     each reports every server process's CPU per message (cpu_us_per_msg, over the
#     sends and the dispatch that follows them); the 4-producer run also probes the
#     dispatch lag (a message every 50 ms pulled until readable);
#   - pull: `bench consume --server` of everything sent (raw records, 1000 per pull), by 1
#     consumer, then by 4 sharing the queues (--consumers 4), once
#     the dispatcher has caught up (its wait is reported as dispatch_wait_s);
#   - RocketMQ 5 clients (issue 17): `bench rocketmq` on serve's
#     --rocketmq-port, the official Python client's producers (Producer.send, one message
#     per call) then SimpleConsumers (receive 32 + ack), 1p/1c then 4p/4c, each client
#     in its own process; every process's CPU per message and front_below_client;
#   - stop serve with SIGTERM (its own process group: SIGKILL after 120 s) and remove the store.
# Then bench/redis.sh (XADD, AOF everysec and always), and a summary table: every
# figure against its goal, and our best send rate over Redis's at equal durability
# (async vs everysec, sync vs always).
# Prints one JSON line per benchmark ({"bench","flush","result"}; results carry the
# client's CPU seconds, client_cpu_s, as client and server share the 2 cores), then the table.
#
# Usage: bash bench/services.sh
# Env: MQSTORE (default `mqstore` on PATH, e.g. MQSTORE=/work/venv/bin/mqstore),
#      ASYNC_MESSAGES (2,000,000: 5 s at the 400 k msgs/s goal), SYNC_MESSAGES (1,000,000:
#      ~7 s at the 150 k goal), LATENCY_MESSAGES (5,000), SETTLE_SECONDS (5),
#      RMQ_MESSAGES (5,000: the RocketMQ clients send one message per call, ~150-250 a second),
#      OUT (also write the JSON lines to this file), REDIS_* (see bench/redis.sh), TMPDIR.
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQSTORE:-mqstore}
ASYNC_MESSAGES=${ASYNC_MESSAGES:-2000000}
SYNC_MESSAGES=${SYNC_MESSAGES:-1000000}
LATENCY_MESSAGES=${LATENCY_MESSAGES:-5000}
RMQ_MESSAGES=${RMQ_MESSAGES:-5000}
SETTLE_SECONDS=${SETTLE_SECONDS:-5}

command -v "$MQ" >/dev/null 2>&1 || { echo "bench/services.sh: $MQ not found (set MQSTORE=/path/to/mqstore)" >&2; exit 2; }
command -v python3 >/dev/null 2>&1 || { echo "bench/services.sh: python3 is needed for the summary" >&2; exit 2; }
for tool in redis-server redis-cli redis-benchmark; do  # fail now rather than after the mqstore part
  command -v "$tool" >/dev/null 2>&1 || { echo "bench/services.sh: $tool not found; install it with: apt-get install -y redis-server redis-tools" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/mqstore-services.XXXXXX")
results="$work/results.jsonl"
serve_pid=

stop_serve() {
  [[ -n $serve_pid ]] || return 0
  if kill -0 "$serve_pid" 2>/dev/null; then
    kill -TERM "$serve_pid" 2>/dev/null || true  # serve alone: Ray's processes must outlive it to close the stores
    for _ in $(seq 1200); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$serve_pid" 2>/dev/null; then
      echo "bench/services.sh: serve did not stop within 120 s; killing its process group" >&2
    fi
  fi
  kill -KILL -- "-$serve_pid" 2>/dev/null || true  # whatever of Ray is left in its group
  wait "$serve_pid" 2>/dev/null || true
  serve_pid=
}
cleanup() { stop_serve; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

emit() { tee -a "$results"; }

start_serve() {  # $1 = flush mode; sets serve_pid, front and rocketmq
  local flush=$1 ready="$work/ready-$1" log="$work/serve-$1.log" rmq_port
  # serve's --rocketmq-port 0 means "not served": take a free port
  rmq_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # setsid: serve and Ray's processes in their own group, away from a Ctrl-C of this script
  setsid "$MQ" serve --store "$work/store-$flush" --port 0 --rocketmq-port "$rmq_port" --flush "$flush" --metrics-port 0 >"$ready" 2>"$log" &
  serve_pid=$!
  for _ in $(seq 1800); do
    [[ -s $ready ]] && break
    if ! kill -0 "$serve_pid" 2>/dev/null; then
      echo "bench/services.sh: mqstore serve --flush $flush exited before ready; its log ends:" >&2
      tail -n 30 "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  front=$(sed -n 's/.*"front": *"\([^"]*\)".*/\1/p' "$ready" | head -n 1)
  rocketmq=$(sed -n 's/.*"rocketmq": *"\([^"]*\)".*/\1/p' "$ready" | head -n 1)
  [[ -n $front ]] || { echo "bench/services.sh: no ready line from serve --flush $flush within 180 s" >&2; tail -n 30 "$log" >&2; exit 1; }
  sleep "$SETTLE_SECONDS"
}

run() {  # $1 = bench name, $2 = flush, rest = mqstore arguments
  local name=$1 flush=$2 out
  shift 2
  out=$("$MQ" "$@")
  printf '{"bench":"%s","flush":"%s","result":%s}\n' "$name" "$flush" "$(tail -n 1 <<<"$out")" | emit
}

printf '{"bench":"load_before","result":"%s"}\n' "$(uptime | sed 's/.*load average/load average/')" | emit
for flush in async sync; do
  if [[ $flush == async ]]; then n=$ASYNC_MESSAGES; else n=$SYNC_MESSAGES; fi
  start_serve "$flush"
  cpu=(--serve-pid "$serve_pid" --shard-dir "$work/store-$flush")
  run latency_1msg "$flush" bench append --server "$front" --messages "$LATENCY_MESSAGES" --batch 1 --producers 1 --body-size 128
  run send_1p      "$flush" bench append --server "$front" --messages "$n" --batch 1000 --producers 1 --body-size 128 "${cpu[@]}"
  run send_4p      "$flush" bench append --server "$front" --messages "$n" --batch 1000 --producers 4 --body-size 128 "${cpu[@]}" --probe-lag
  run send_4p_columns "$flush" bench append --server "$front" --messages "$n" --batch 1000 --producers 4 --body-size 128 --wire columns "${cpu[@]}"
  run pull         "$flush" bench consume --server "$front" --batch 1000
  run pull_4c      "$flush" bench consume --server "$front" --batch 1000 --consumers 4 "${cpu[@]}"
  run rocketmq_1p1c "$flush" bench rocketmq --server "$rocketmq" --producers 1 --consumers 1 --messages "$RMQ_MESSAGES" --body-size 128 "${cpu[@]}"
  run rocketmq_4p4c "$flush" bench rocketmq --server "$rocketmq" --producers 4 --consumers 4 --messages "$RMQ_MESSAGES" --body-size 128 "${cpu[@]}"
  stop_serve
  rm -rf "$work/store-$flush"
done
bash bench/redis.sh | emit
printf '{"bench":"load_after","result":"%s"}\n' "$(uptime | sed 's/.*load average/load average/')" | emit
[[ -z ${OUT:-} ]] || cp "$results" "$OUT"

python3 - "$results" <<'EOF'
import json, sys

rows = [json.loads(line) for line in open(sys.argv[1])]
res = {(r["bench"], r.get("flush")): r["result"] for r in rows}

def k(v):
    return f"{v / 1000:,.0f} k msgs/s"

def verdict(ok):
    return "met" if ok else "missed"

out = ["", "| figure | goal | measured | verdict |", "|---|---|---|---|"]
best = {}
for flush in ("async", "sync"):
    for bench, label in (("send_1p", "1 producer"), ("send_4p", "4 producers"), ("send_4p_columns", "4 producers, columns")):
        r = res.get((bench, flush))
        if r is None:
            continue
        if bench != "send_4p_columns":
            best[flush] = max(best.get(flush, 0), r["msgs_per_s"])
        out.append(f"| send, flush {flush}, {label} (128 B, batches of 1000) | see the Redis ratio | "
                   f"{k(r['msgs_per_s'])} (p99 {r['p99_ms']:.1f} ms per batch; client CPU {r.get('client_cpu_s', '?')} s "
                   f"in {r['seconds']:.1f} s) | - |")
        cpu = r.get("cpu_us_per_msg")
        if cpu:
            parts = ", ".join(f"{p} {v:.2f}" for p, v in cpu.items() if p != "total" and v >= 0.05)
            out.append(f"| CPU per message, all processes, send flush {flush}, {label} | <= 2 us | "
                       f"{cpu['total']:.2f} us ({parts}) | {verdict(cpu['total'] <= 2)} |")
        if "dispatch_lag_p99_ms" in r:
            out.append(f"| dispatch lag at full send rate, flush {flush}, {label} ({r['dispatch_lag_probes']} probes) | p99 < 100 ms | "
                       f"p99 {r['dispatch_lag_p99_ms']:.1f} ms (p50 {r['dispatch_lag_p50_ms']:.1f}, max {r['dispatch_lag_max_ms']:.1f}) | "
                       f"{verdict(r['dispatch_lag_p99_ms'] < 100)} |")
for flush, bench in (("async", "pull"), ("async", "pull_4c"), ("sync", "pull"), ("sync", "pull_4c")):
    r = res.get((bench, flush))
    if r is not None:
        who = f"{r.get('consumers', 1)} consumer(s)"
        goal = 1_000_000 if bench == "pull_4c" else 500_000
        out.append(f"| pull, {who}, store written with flush {flush} ({r['messages']:,} msgs, 1000 per pull) | >= {k(goal)} | "
                   f"{k(r['msgs_per_s'])} (client CPU {r.get('client_cpu_s', '?')} s in {r['seconds']:.1f} s; "
                   f"dispatch caught up {r.get('dispatch_wait_s', '?')} s after the sends) | "
                   f"{verdict(r['msgs_per_s'] >= goal)} |")
        cpu = r.get("cpu_us_per_msg")
        if cpu:
            parts = ", ".join(f"{p} {v:.2f}" for p, v in cpu.items() if p != "total" and v >= 0.05)
            out.append(f"| CPU per message, all processes, pull, {who} | - | {cpu['total']:.2f} us ({parts}) | - |")
for flush in ("async", "sync"):
    r = res.get(("latency_1msg", flush))
    if r is not None:
        out.append(f"| single-message send round trip, flush {flush}, idle ({r['messages']:,} calls) | p99 < 2 ms | "
                   f"p99 {r['p99_ms']:.2f} ms (p50 {r['p50_ms']:.2f} ms) | {verdict(r['p99_ms'] < 2)} |")
for flush, bench, who in ((f, b, w) for f in ("async", "sync") for b, w in (("rocketmq_1p1c", "1 producer / 1 consumer"), ("rocketmq_4p4c", "4 producers / 4 consumers"))):
    r = res.get((bench, flush))
    if r is None:
        continue
    s = r["server_cpu_us_per_msg"]
    out.append(f"| RocketMQ 5 Python client, flush {flush}, {who} ({r['messages']:,} msgs, 128 B, send then receive 32 + ack) | - | "
               f"send {r['send_msgs_per_s']:,.0f} msgs/s, receive {r['receive_msgs_per_s']:,.0f} msgs/s "
               f"({r['duplicates']} duplicates, {r['missing']} missing) | - |")
    for phase in ("send", "receive"):
        g = r["goal"][phase]
        rest = ", ".join(f"{p} {s[phase][p]:.0f}" for p in ("commitlog-0", "consumequeue-0", "dispatcher-0", "index-0") if p in s[phase])
        out.append(f"| CPU per message, RocketMQ {phase}, flush {flush}, {who}: front vs clients | front < client | "
                   f"front {g['front_us_per_msg']:.0f} us, client {g['client_us_per_msg']:.0f} us ({rest}) | "
                   f"{verdict(bool(g['front_below_client']))} |")
for flush, fsync in (("async", "everysec"), ("sync", "always")):
    r = res.get((f"redis_xadd_{fsync}", None))
    if r is None or flush not in best:
        continue
    ratio = best[flush] / r["msgs_per_s"]
    out.append(f"| Redis XADD, AOF {fsync} (-P {r['pipeline']}, -c {r['clients']}, {r['requests']:,} msgs) | - | "
               f"{k(r['msgs_per_s'])} (p99 {r['p99_ms']:.1f} ms) | - |")
    out.append(f"| our best send, flush {flush} / Redis {fsync} | >= 1.5 | {ratio:.2f} | {verdict(ratio >= 1.5)} |")
for name in ("load_before", "load_after"):
    r = res.get((name, None))
    if r is not None:
        out.append(f"\n{name.replace('_', ' ')}: {r}")
print("\n".join(out))
EOF
