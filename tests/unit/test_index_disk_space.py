"""The index and the disk (issue 25, item 3): index files take blocks as entries
come instead of 420 MB at once, and a full disk is a typed error from ``put`` with
nothing half-written, after which the index resumes where it stopped."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from mqstore.errors import StoreNotWritableError
from mqstore.formats import index_file_size, index_key_hashes
from mqstore.store import MessageBatch, StoreConfig, faults
from mqstore.store.dispatch import IndexEntries
from mqstore.store.index_service import RESERVE_STEP_BYTES, IndexService
from mqstore.store.message_store import MessageStore

T0 = 1_700_000_000_000


class _Clock:
    def now_ms(self) -> int:
        return T0

    def monotonic(self) -> float:
        return T0 / 1000


@pytest.fixture(autouse=True)
def _no_faults():
    yield
    faults.install(None)


def _entries(lo: int, hi: int) -> IndexEntries:
    keys = [f"T#k{i % 7}" for i in range(lo, hi)]
    phys = np.arange(lo, hi, dtype=np.int64) * 100
    return IndexEntries(index_key_hashes(keys), phys, T0 + phys)


def test_a_default_sized_index_file_takes_blocks_as_entries_come(tmp_path: Path) -> None:
    """A default index file (5,000,000 slots x 20,000,000 entries) is 420,000,040
    bytes long, as RocketMQ reads it, but a new one holds only its slot table and a
    step of entries on disk: a store with less than 420 MB free still indexes."""
    svc = IndexService(tmp_path, clock=_Clock())
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    svc.put(_entries(0, 1000))
    st = (svc.directory / svc.files[0]).stat()
    assert st.st_size == index_file_size(5_000_000, 20_000_000) == 420_000_040
    slots_bytes = 40 + 4 * 5_000_000
    assert st.st_blocks * 512 <= slots_bytes + RESERVE_STEP_BYTES + (1 << 20)  # ~24 MB, not 420 MB
    assert svc.query("T", "k3", 64) == [i * 100 for i in range(999, -1, -1) if i % 7 == 3][:64]
    svc.close()


def test_a_full_disk_refuses_the_put_and_the_index_resumes_when_space_is_back(tmp_path: Path) -> None:
    """ENOSPC while the blocks of the next entries are allocated: put raises
    StoreNotWritableError (cause disk_full) before writing any of them; once space
    is back, the same batch goes in and queries answer as if nothing had happened."""
    svc = IndexService(tmp_path, hash_slots=64, max_entries=400_000, clock=_Clock())
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    per_step = RESERVE_STEP_BYTES // 20
    svc.put(_entries(0, 10))
    faults.install("index.reserve=ENOSPCx0")
    with pytest.raises(StoreNotWritableError) as e:
        svc.put(_entries(10, 10 + per_step + 10))  # past the first step of blocks
    assert e.value.cause == "disk_full"
    assert svc.stats().entries == 10  # nothing half-written
    faults.install(None)
    assert svc.put(_entries(10, 10 + per_step + 10)).indexed == per_step + 10
    assert svc.stats().entries == per_step + 20
    assert svc.query("T", "k1", 3) == [i * 100 for i in range(per_step + 19, -1, -1) if i % 7 == 1][:3]
    svc.close()


def test_an_embedded_store_feeds_its_consume_queues_while_the_index_has_no_space(tmp_path: Path) -> None:
    """MessageStore (the embedded store, ``--store``): the consume queues take every
    message while no index file can be made, status names the index as stuck, and
    the index catches up from its own progress once space is back."""
    cfg = StoreConfig(
        segment_bytes=1 << 20, consume_queue_file_bytes=20 * 100, index_hash_slots=64, index_max_entries=256
    )
    faults.install("index.create=ENOSPCx0,index.reserve=ENOSPCx0")
    with MessageStore(tmp_path, cfg) as s:
        res = s.append(MessageBatch(topics="T", bodies=[b"m%d" % i for i in range(50)], queue_ids=0, keys="k"))
        deadline = time.monotonic() + 10
        while s.consume_queues.find("T", 0) is None or s.consume_queues.find("T", 0).max_offset < 50:
            assert time.monotonic() < deadline, "the consume queues were held back by the index"
            time.sleep(0.01)
        # the index fails its chunk on its own time: under load after the queues have it all
        while "index" not in (stuck := s.status()["stuck"]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "disk full" in stuck["index"]["error"] and stuck["index"]["since_ms"] > 0
        assert not s.wait_dispatched(timeout_s=0.2)  # the index is not there yet
        faults.install(None)
        assert s.wait_dispatched(timeout_s=15)
        assert s.status()["stuck"] == {}
        assert [r.physical_offset for r in s.query_by_key("T", "k", max_num=64)] == sorted(
            res.physical_offsets.tolist(), reverse=True
        )
