"""Benchmarks of the Spark jobs, one JSON line each (BENCHMARKS.md, bench/spark.sh)::

    python -m mqstore.jobs.bench reconcile --store DIR [--master local[2]] [--runs 3] [--chunk-mb 64]
    python -m mqstore.jobs.bench datasource --store DIR [--master local[2]] [--runs 3] [--properties map]

Spark start-up is timed apart (``session_seconds``) and excluded from the rates:
``reconcile`` reports the whole run (planning, the queue job, the chunk + index job,
the driver's checks) over the commitlog bytes walked; ``datasource`` reads every
message through ``spark.read.format("mqstore")`` into Spark's ``noop`` sink (every
column converted to Spark rows, nothing written) and, alternating with it, as many
rows from a probe source (``mqstore_probe``: the same columns in ready-made batches,
no decoding, as many partitions) to measure the ceiling of a Python source on this
machine in the same run. Each run is reported; the best and the median are summarised.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition


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


@functools.lru_cache(maxsize=2)
def _template(store: str, properties: str):
    """The store's first record batch (decoded once per Python worker)."""
    from mqstore.jobs.columns import segment_batches
    from mqstore.store.reader import CommitLogReader

    base, path = CommitLogReader(store).segments[0]
    return next(iter(segment_batches(path, base, properties=properties)))


class ProbeReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.store, self.properties = options["path"], options.get("properties", "map")
        self.rows, self.parts = int(options["rows"]), max(1, int(options["partitions"]))

    def partitions(self):
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition):
        i = partition.value
        rows = self.rows // self.parts + (i < self.rows % self.parts)
        template = _template(self.store, self.properties)
        while rows > 0:
            batch = template if rows >= template.num_rows else template.slice(0, rows)
            yield batch
            rows -= batch.num_rows


class ProbeSource(DataSource):
    """Ready-made Arrow batches of the data source's columns (the store's first batch,
    repeated): what Spark takes from a Python source here when decoding costs nothing."""

    @classmethod
    def name(cls) -> str:
        return "mqstore_probe"

    def schema(self) -> str:
        from mqstore.jobs.columns import spark_ddl

        return spark_ddl(self.options.get("properties", "map"))

    def reader(self, schema) -> ProbeReader:
        return ProbeReader(self.options)


def bench_datasource(spark, store: str, runs: int, properties: str) -> dict:
    from mqstore.jobs.bench import ProbeSource  # by its module's name, not __main__'s: workers import it
    from mqstore.jobs.spark import register_datasource

    register_datasource(spark)
    spark.dataSource.register(ProbeSource)
    df = spark.read.format("mqstore").option("properties", properties).load(store)
    t = time.perf_counter()
    n = df.count()
    count_s = time.perf_counter() - t
    parts = df.rdd.getNumPartitions()
    probe = (
        spark.read.format("mqstore_probe")
        .option("properties", properties)
        .option("rows", str(n))
        .option("partitions", str(parts))
        .load(store)
    )
    probe.write.format("noop").mode("overwrite").save()  # warm the workers' templates
    rates, probe_rates = [], []
    for _ in range(runs):
        for frame, out in ((df, rates), (probe, probe_rates)):
            t = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            out.append(n / (time.perf_counter() - t))
    return {
        "bench": "datasource",
        "store": store,
        "messages": n,
        "partitions": parts,
        "properties": properties,
        "count_seconds": round(count_s, 2),
        "msgs_per_s": _summary(rates),
        "probe_msgs_per_s": _summary(probe_rates),
        "vs_probe": round(statistics.median(rates) / statistics.median(probe_rates), 3),
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
