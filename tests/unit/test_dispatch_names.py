"""The dispatcher meets the same topics chunk after chunk: each name is decoded once
(formats.message._fields_of keeps one str per topic's bytes), and queue files made
ahead by the creator thread are taken by a queue's first write-out
(PooledFile.create(adopt=True))."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.bench.workload import Workload
from mqstore.store import CommitLog, StoreConfig
from mqstore.store.dispatch import build_dispatch_batch
from mqstore.store.file_pool import FilePool, PooledFile


def test_topic_names_are_decoded_once_across_chunks(tmp_path: Path) -> None:
    cl = CommitLog(tmp_path, StoreConfig(segment_bytes=8 << 20))
    w = Workload(body_size=32, topics=50, queues=4)
    for start in range(0, 2000, 500):
        cl.append(w.batch(start, 500))
    first = build_dispatch_batch(cl.scan(cl.min_offset, max_bytes=64 << 10))
    rest = build_dispatch_batch(cl.scan(first.physical_offsets[-1] + first.sizes[-1]))
    assert sorted(first.topics) == sorted(rest.topics) == sorted(f"BenchTopic{i}" for i in range(50))
    same = {t: t for t in first.topics}
    assert all(same[t] is t for t in rest.topics)  # the very same str objects: decoded once, hashes kept
    cl.close()


def test_a_write_out_adopts_a_file_made_ahead_and_nothing_else(tmp_path: Path) -> None:
    pool = FilePool(4)
    path = tmp_path / "00000000000000000000"
    PooledFile.create(path, 0, 4000, pool, preallocate=False)  # the creator's: zero-filled
    f = PooledFile.create(path, 0, 4000, pool, preallocate=False, data=b"u" * 20, at=40, adopt=True)
    assert f.read(40, 20) == b"u" * 20 and path.stat().st_size == 4000
    with pytest.raises(FileExistsError):
        PooledFile.create(path, 0, 4000, pool, preallocate=False)  # without adopt: an error, as before
    other = tmp_path / "00000000000000004000"
    other.write_bytes(b"x" * 100)  # not one the creator made
    with pytest.raises(FileExistsError):
        PooledFile.create(other, 4000, 4000, pool, preallocate=False, adopt=True)
    pool.close_all()
