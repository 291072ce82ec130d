"""Benchmarks of the Spark jobs, one JSON line each (BENCHMARKS.md, bench/spark.sh)::

    python -m mqstore.jobs.bench reconcile --store DIR [--master local[2]] [--runs 3] [--chunk-mb 64]
    python -m mqstore.jobs.bench datasource --store DIR [--master local[2]] [--runs 3] [--properties map]

Spark start-up is timed apart (``session_seconds``) and excluded from the rates:
``reconcile`` reports the whole run (planning, the queue job, the chunk + index job,
the driver's checks) over the commitlog bytes walked; ``datasource`` reads every
message through ``spark.read.format("mqstore")`` into Spark's ``noop`` sink (every
column converted to Spark rows, nothing written). Each run is reported; the best and
the median are summarised.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _summary(values: list[float], *, lower_is_better: bool = False) -> dict:
    best = min(values) if lower_is_better else max(values)
    return {
        "best": round(best, 1),
        "median": round(statistics.median(values), 1),
        "runs": [round(v, 1) for v in values],
    }


def bench_reconcile(spark, store: str, runs: int, chunk_mb: int) -> dict:
    from mqstore.jobs.reconcile import reconcile

    mb_s, commitlog_mb_s, seconds = [], [], []
    result = None
    for _ in range(runs):
        result = reconcile(spark, store, chunk_bytes=chunk_mb << 20)
        seconds.append(result.seconds)
        mb_s.append(result.bytes / 1e6 / result.seconds)
        commitlog_mb_s.append(result.bytes / 1e6 / result.counts["commitlog_seconds"])
    return {
        "bench": "reconcile",
        "store": store,
        "messages": result.messages,
        "bytes": result.bytes,
        "findings": sum(result.by_kind.values()),
        "chunks": result.counts["chunks"],
        "seconds": _summary(seconds, lower_is_better=True),
        "mb_per_s": _summary(mb_s),
        "chunk_job_mb_per_s": _summary(commitlog_mb_s),
    }


def bench_datasource(spark, store: str, runs: int, properties: str) -> dict:
    from mqstore.jobs.spark import register_datasource

    register_datasource(spark)
    df = spark.read.format("mqstore").option("properties", properties).load(store)
    t = time.perf_counter()
    n = df.count()
    count_s = time.perf_counter() - t
    rates = []
    for _ in range(runs):
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        rates.append(n / (time.perf_counter() - t))
    return {
        "bench": "datasource",
        "store": store,
        "messages": n,
        "properties": properties,
        "count_seconds": round(count_s, 2),
        "msgs_per_s": _summary(rates),
    }


def main(argv: list[str] | None = None) -> None:
    from mqstore.jobs.spark import session
    from mqstore.logging import configure_logging

    p = argparse.ArgumentParser(prog="python -m mqstore.jobs.bench")
    p.add_argument("what", choices=("reconcile", "datasource"))
    p.add_argument("--store", required=True)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--chunk-mb", type=int, default=64)
    p.add_argument("--properties", choices=("map", "string"), default="map")
    args = p.parse_args(argv)
    configure_logging(level="warning")
    t = time.perf_counter()
    spark = session(args.master)
    spark.range(1).count()  # the first job starts the executors' machinery
    started = time.perf_counter() - t
    try:
        if args.what == "reconcile":
            out = bench_reconcile(spark, args.store, args.runs, args.chunk_mb)
        else:
            out = bench_datasource(spark, args.store, args.runs, args.properties)
    finally:
        spark.stop()
    print(json.dumps({**out, "master": args.master, "session_seconds": round(started, 1)}), flush=True)


if __name__ == "__main__":
    main()
