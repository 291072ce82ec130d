#!/usr/bin/env bash
# The Spark goals (BENCHMARKS.md, "Spark reconciliation"): reconcile throughput on a
# store of more than 1 GiB and the mqstore data source's rate, both on local[2] with
# Spark start-up excluded. Prints one JSON line per benchmark.
# Usage: bash bench/spark.sh [DIR]   (default ./data/spark-bench; the stores are kept for reruns)
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQ:-.venv/bin/mqstore}
PY=${PY:-.venv/bin/python}
DIR=${1:-./data/spark-bench}
mkdir -p "$DIR"
# 3.6 M messages of 128 B (1.11 GB of commitlog, default 1 GiB segments, consume queues and index)
[ -d "$DIR/big" ] || "$MQ" bench append --store "$DIR/big" --messages 3600000 --body-size 128 --topics 4 --queues 4 >/dev/null
# 1 M messages of 128 B in 64 MiB segments
[ -d "$DIR/1m" ] || "$MQ" bench append --store "$DIR/1m" --messages 1000000 --body-size 128 --topics 4 --queues 4 \
    --segment-bytes $((64 << 20)) --index-hash-slots 500000 --index-max-entries 2000000 >/dev/null
"$PY" -m mqstore.jobs.bench reconcile --store "$DIR/big" --master 'local[2]' --runs 3
"$PY" -m mqstore.jobs.bench datasource --store "$DIR/1m" --master 'local[2]' --runs 3
"$PY" -m mqstore.jobs.bench datasource --store "$DIR/1m" --master 'local[2]' --runs 3 --properties string
