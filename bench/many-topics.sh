#!/usr/bin/env bash
# Many-topics goals (issue 6), inside default OS limits (ulimit -n 1024; vm.max_map_count
# as the kernel has it, 65,530 by default):
#   1. append + dispatch of 2,000,000 messages (128 B bodies) at 1, 100, 1,000, 10,000 and
#      50,000 topics x 4 queues: throughput, p99, RSS, open files, maps;
#   2. restart at 20,000 topics: after a clean close, then after kill -9 mid-run, and
#      retention deleting the oldest segments, each with a sample of queues checked
#      against the commitlog.
# Usage: bash bench/many-topics.sh [DIR] [TOPIC COUNTS...]   (default ./data/many; wiped)
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQ:-.venv/bin/mqstore}
DIR=${1:-./data/many}
shift || true
COUNTS=${*:-1 100 1000 10000 50000}
ulimit -n 1024
show() { printf '{"bench":"%s","result":%s}\n' "$1" "$(tail -n 1)"; }
settle() { rm -rf "$DIR"; sync; sleep 10; }  # the VM's disk needs a moment after big deletes

for t in $COUNTS; do
  settle
  "$MQ" bench append --store "$DIR" --messages 2000000 --topics "$t" --queues 4 | show "append_dispatch_topics_$t"
done

# Restart, recovery and retention at 20,000 topics (64 MiB segments so retention has some).
settle
"$MQ" bench append --store "$DIR" --messages 2000000 --topics 20000 --queues 4 --segment-bytes 67108864 \
  | show append_dispatch_topics_20000
"$MQ" bench reopen --store "$DIR" --sample 2000 | show reopen_clean_topics_20000
"$MQ" bench reopen --store "$DIR" --sample 2000 --delete-segments 3 | show retention_topics_20000
settle
"$MQ" bench append --store "$DIR" --messages 3000000 --topics 20000 --queues 4 --segment-bytes 67108864 >/dev/null 2>&1 &
writer=$!
sleep 40
kill -9 "$writer" || true
wait "$writer" 2>/dev/null || true
"$MQ" bench reopen --store "$DIR" --sample 2000 | show reopen_after_kill9_topics_20000
rm -rf "$DIR"
