"""The dispatcher survives a failing disk: it retries (its puts are idempotent) and
catches up once the fault is gone, instead of stopping until a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.store import MessageBatch, StoreConfig, faults
from mqstore.store.message_store import MessageStore

CFG = StoreConfig(segment_bytes=1 << 20, consume_queue_file_bytes=20 * 100, index_hash_slots=64, index_max_entries=256)


@pytest.mark.slow  # over ~2 s (tests/README.md)
def test_dispatch_retries_after_an_index_file_cannot_be_created(tmp_path: Path) -> None:
    faults.install("index.create=ENOSPC@1x2")  # the first two tries to make an index file fail
    try:
        with MessageStore(tmp_path, CFG) as s:
            res = s.append(MessageBatch(topics="T", bodies=[b"m%d" % i for i in range(50)], queue_ids=0, keys="k"))
            assert s.wait_dispatched(timeout_s=15)  # caught up after the retries
            assert s.dispatcher.error is None
            assert faults.hits()["index.create"] >= 3
            assert [r.physical_offset for r in s.query_by_key("T", "k", max_num=64)] == sorted(
                res.physical_offsets.tolist(), reverse=True
            )
            assert s.consume_queues.find("T", 0).max_offset == 50
    finally:
        faults.install(None)
