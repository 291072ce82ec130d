"""How the Spark jobs cut segments into tasks (mqstore.jobs.chunks), read without a
Spark session: the data source's partitions of a one-segment store are several, and
the records their tasks read are every record of the store, each once."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.jobs.chunks import segment_chunks
from mqstore.jobs.columns import segment_batches
from mqstore.jobs.datasource import MqstoreReader
from mqstore.store import MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore
from mqstore.store.reader import CommitLogReader

SEGMENT = 4 << 20


@pytest.fixture(scope="module")
def two_segments(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """A full 4 MiB segment and a second one holding about 1.4 MiB of records."""
    store = tmp_path_factory.mktemp("chunks")
    offsets: list[int] = []
    with MessageStore(store, StoreConfig(segment_bytes=SEGMENT)) as s:
        for i in range(35):  # about 160 kB each
            res = s.append(MessageBatch(topics=f"T{i % 3}", bodies=[b"x" * (i % 200)] * 1000, queue_ids=i % 4))
            offsets += res.physical_offsets.tolist()
    assert SEGMENT + (1 << 20) < offsets[-1] < 2 * SEGMENT
    return store, offsets


def read_chunks(store: Path, chunk_bytes: int) -> tuple[list[int], int]:
    chunks, data = segment_chunks(CommitLogReader(store).segments, chunk_bytes)
    got = []
    for c in chunks:
        for batch in segment_batches(c.path, c.base, c.lo, c.hi):
            got += batch.column("physical_offset").to_pylist()
    return got, len(chunks)


@pytest.mark.parametrize("chunk_bytes", [64 << 10, 300_001, 1 << 20, SEGMENT, 1 << 62])
def test_every_record_is_read_by_exactly_one_chunk(two_segments, chunk_bytes: int) -> None:
    store, offsets = two_segments
    got, n = read_chunks(store, chunk_bytes)
    assert got == offsets
    if chunk_bytes < SEGMENT:
        assert n > SEGMENT // chunk_bytes


def test_the_last_segment_is_cut_where_its_data_ends(two_segments) -> None:
    store, offsets = two_segments
    chunks, data = segment_chunks(CommitLogReader(store).segments, 256 << 10)
    last = [c for c in chunks if c.base == SEGMENT]
    assert all(c.last for c in last) and not any(c.last for c in chunks if c.base == 0)
    assert last[-1].hi == SEGMENT  # the last chunk runs to the segment's end
    used = offsets[-1] - SEGMENT
    assert len(last) == -(-used // (256 << 10)) or len(last) == -(-used // (256 << 10)) + 1
    assert SEGMENT + used <= data < 2 * SEGMENT


def test_data_source_partitions_split_one_segment(two_segments) -> None:
    store, _ = two_segments
    default = MqstoreReader({"path": str(store)}).partitions()
    assert len(default) == 2  # 64 MiB chunks: one per segment here
    split = MqstoreReader({"path": str(store), "chunkBytes": str(1 << 20)}).partitions()
    assert len(split) >= 5 and {p.base for p in split} == {0, SEGMENT}
    whole = MqstoreReader({"path": str(store), "chunkBytes": "0"}).partitions()
    assert [(p.base, p.lo) for p in whole] == [(0, 0), (SEGMENT, 0)]
    with pytest.raises(ValueError, match="chunkBytes"):
        MqstoreReader({"path": str(store), "chunkBytes": "-1"})
