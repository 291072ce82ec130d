"""The ``mqstore`` Spark data source: a store's CommitLog messages as a DataFrame.

::

    from mqstore.jobs.datasource import MqstoreDataSource
    spark.dataSource.register(MqstoreDataSource)
    df = spark.read.format("mqstore").load("/data/store")
    df.createOrReplaceTempView("messages")
    spark.sql("SELECT topic, count(*) FROM messages GROUP BY topic").show()
    df.write.parquet("/tmp/messages.parquet")

One row per valid record (every field of RocketMQ's record; the schema is
``mqstore.jobs.columns.SCHEMA``), one input partition per 64 MiB of each CommitLog
segment's data (mqstore.jobs.chunks; a partition starts at its first record, found
by record signature, and finishes the record that crosses its end), so even a
one-segment store is read by several tasks. Read-only: no lock, nothing written, so
a running store can be read (what is on disk now). Options:

    checkCrc    "true": skip records whose body fails its CRC (default "false": every
                record whose layout is valid; compare body_crc yourself)
    chunkBytes  bytes of a segment per partition (default 64 MiB; "0": one
                partition per segment)
    batchBytes  commitlog bytes per Arrow batch (default 4 MiB)
    properties  "map" (default: map<string,string>) or "string" (the raw properties
                string, name \x01 value \x02 ...: cheaper; Spark SQL's
                str_to_map(properties, '\u0002', '\u0001') makes the map)

The classes are pickled to the workers, which import this module: mqstore must be
importable there (see deploy/README.md).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from mqstore.jobs.chunks import DEFAULT_CHUNK_BYTES, segment_chunks
from mqstore.jobs.columns import BATCH_BYTES, spark_ddl


class SegmentPartition(InputPartition):
    """One segment, or the part of one whose records start in [lo, hi)."""

    def __init__(self, path: str, base: int, lo: int, hi: int | None) -> None:
        super().__init__((path, base, lo, hi))
        self.path, self.base, self.lo, self.hi = path, base, lo, hi

    def __repr__(self) -> str:
        return f"SegmentPartition({self.path}, lo={self.lo}, hi={self.hi})"


def _flag(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _properties_option(options) -> str:
    value = str(options.get("properties", "map") or "map").lower()
    if value not in ("map", "string"):
        raise ValueError(f'option properties is "map" or "string", got {value!r}')
    return value


class MqstoreReader(DataSourceReader):
    def __init__(self, options) -> None:
        path = options.get("path")
        if not path:
            raise ValueError('spark.read.format("mqstore").load(DIR): the store directory is missing')
        self.store = path
        self.check_crc = _flag(options.get("checkCrc"), False)
        chunk = options.get("chunkBytes")
        self.chunk_bytes = DEFAULT_CHUNK_BYTES if chunk is None or str(chunk).strip() == "" else int(chunk)
        if self.chunk_bytes < 0:
            raise ValueError(f"option chunkBytes is a number of bytes >= 0, got {chunk!r}")
        self.batch_bytes = int(options.get("batchBytes", BATCH_BYTES) or BATCH_BYTES)
        self.properties = _properties_option(options)

    def partitions(self):
        from mqstore.store.reader import CommitLogReader

        whole = 1 << 62  # chunkBytes 0: one partition per segment
        chunks, _ = segment_chunks(CommitLogReader(self.store).segments, self.chunk_bytes or whole)
        parts = [SegmentPartition(str(c.path), c.base, c.lo, c.hi) for c in chunks]
        return parts or [SegmentPartition("", 0, 0, 0)]

    def read(self, partition: SegmentPartition):
        from mqstore.jobs.columns import segment_batches

        if not partition.path:
            return
        yield from segment_batches(
            partition.path,
            partition.base,
            partition.lo,
            partition.hi,
            check_crc=self.check_crc,
            batch_bytes=self.batch_bytes,
            properties=self.properties,
        )


class MqstoreDataSource(DataSource):
    """``spark.read.format("mqstore").load(store_dir)``; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "mqstore"

    def schema(self) -> str:
        return spark_ddl(_properties_option(self.options))

    def reader(self, schema) -> MqstoreReader:
        return MqstoreReader(self.options)


__all__ = ["MqstoreDataSource", "MqstoreReader", "SegmentPartition"]
