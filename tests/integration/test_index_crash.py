"""kill -9 a real writer that appends and indexes, several times over, then a clean
restart: recovery re-dispatches from before the crash, and the index must still
hold each (key hash, record) pair once, with every acknowledged message found once
by its key and its UNIQ_KEY, and ``verify`` clean."""

from __future__ import annotations

import mmap
from collections import Counter
from pathlib import Path

import pytest

from mqstore.formats import IndexFileView
from mqstore.store import StoreConfig
from mqstore.store.index_service import INDEX_DIR
from mqstore.store.message_store import MessageStore
from mqstore.store.verify import verify_store
from tests.integration.test_crash_dispatch import kill_bench_append

SEG = 1 << 20
SLOTS, ENTRIES = 1000, 4000  # small files: several fill (and move the checkpoint's index time) per run


def run_and_kill(store: Path, ack: Path, min_acks: int = 4000) -> list[dict]:
    return kill_bench_append(
        store,
        ack,
        [
            "--body-size",
            "100",
            "--topics",
            "2",
            "--queues",
            "2",
            "--flush",
            "sync",
            "--producers",
            "1",
            "--batch",
            "50",
            "--segment-bytes",
            str(SEG),
            "--index-hash-slots",
            str(SLOTS),
            "--index-max-entries",
            str(ENTRIES),
        ],
        min_acks=min_acks,
        settle_s=0.2,
    )


def duplicate_entries(store: Path) -> int:
    pairs: Counter[tuple[int, int]] = Counter()
    for p in sorted((store / INDEX_DIR).iterdir()):
        with p.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            e = IndexFileView(mm, SLOTS, ENTRIES).entries()
            pairs.update(zip(e["phy_offset"].tolist(), e["key_hash"].tolist()))
    return sum(n - 1 for n in pairs.values())


@pytest.mark.crash
def test_kill9_then_restarts_index_each_key_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    acked: list[dict] = []
    cfg = StoreConfig(segment_bytes=SEG, index_hash_slots=SLOTS, index_max_entries=ENTRIES)
    for round_ in range(3):
        acked += run_and_kill(store, tmp_path / f"acks-{round_}")
        with MessageStore(store, cfg, background_dispatch=False) as s:  # abnormal recovery, re-dispatch, clean close
            assert not s.commitlog.recovery.clean_shutdown
            assert s.dispatcher.dispatched_offset == s.commitlog.wrote_offset
        assert duplicate_entries(store) == 0, f"round {round_}"
    with MessageStore(store, cfg, background_dispatch=False) as s:  # a clean restart on top
        assert s.commitlog.recovery.clean_shutdown and s.dispatcher.dispatched_records == 0
        for a in acked[:: max(1, len(acked) // 40)] + acked[-5:]:
            rec = s.commitlog.read(a["physical_offset"])
            for key in rec.keys.split():
                hits = [h.physical_offset for h in s.query_by_key(rec.topic, key, max_num=64)]
                assert hits.count(rec.physical_offset) == 1, (key, a)
            assert [h.physical_offset for h in s.query_by_unique_key(rec.topic, rec.unique_key, max_num=1)] == [
                rec.physical_offset
            ]
    assert duplicate_entries(store) == 0
    report = verify_store(store, index_keys="full")
    assert report.ok and not report.of_kind("index_entry_duplicate"), report.findings
