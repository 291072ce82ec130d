"""Index answers count messages: a (key hash, record) pair is indexed once (repeated
KEYS, re-dispatch after a clean restart, a file rolled mid-record), queries dedupe
offsets before ``max_num``, the store resumes dispatch just past the last indexed
record, and verify / repair find and remove duplicate entries (files written by
RocketMQ, or by mqstore before it stopped writing them)."""

from __future__ import annotations

import mmap
from collections import Counter
from pathlib import Path

import numpy as np

from mqstore.formats import IndexFileView, index_key_hashes
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.dispatch import IndexEntries
from mqstore.store.index_service import INDEX_DIR, IndexService
from mqstore.store.message_store import MessageStore
from mqstore.store.repair import repair_store
from mqstore.store.verify import verify_store

CFG = StoreConfig(segment_bytes=1 << 20, index_hash_slots=64, index_max_entries=40, consume_queue_file_bytes=600)


def index_pairs(store: Path, cfg: StoreConfig = CFG) -> list[tuple[int, int]]:
    """(commitlog offset, key hash) of every entry of every index file, oldest first."""
    out = []
    for p in sorted((store / INDEX_DIR).iterdir()):
        with p.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            e = IndexFileView(mm, cfg.index_hash_slots, cfg.index_max_entries).entries()
            out += zip(e["phy_offset"].tolist(), e["key_hash"].tolist())
    return out


def duplicates(store: Path, cfg: StoreConfig = CFG) -> dict[tuple[int, int], int]:
    return {pair: n for pair, n in Counter(index_pairs(store, cfg)).items() if n > 1}


def test_repeated_keys_count_as_one_message_each(tmp_path: Path) -> None:
    """KEYS "self self self" on 3 messages: a query for ``self`` with max_num 3 gets all 3."""
    with MessageStore(tmp_path, CFG) as s:
        s.append(MessageBatch(topics="T", bodies=[b"m0", b"m1", b"m2"], queue_ids=0, keys="self self self"))
        s.wait_dispatched()
        assert [r.body for r in s.query_by_key("T", "self", max_num=3)] == [b"m2", b"m1", b"m0"]
        assert [r.body for r in s.query_by_key("T", "self", max_num=2)] == [b"m2", b"m1"]
        assert s.index.query("T", "self", max_num=3) == sorted(s.index.query("T", "self"), reverse=True)
    assert duplicates(tmp_path) == {}
    # one entry per distinct key and message: UNIQ_KEY + "self"
    assert len(index_pairs(tmp_path)) == 3 * 2


def test_a_key_repeated_in_one_message_is_one_entry(tmp_path: Path) -> None:
    svc = IndexService(tmp_path, hash_slots=8, max_entries=16)
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    keys = ["T#a", "T#a", "T#b", "T#a"]  # KEYS "a a b a"
    r = svc.put(IndexEntries(index_key_hashes(keys), np.array([100] * 4), np.array([1000] * 4)))
    assert (r.indexed, r.skipped) == (2, 2)
    assert svc.query("T", "a") == [100] and svc.stats().entries == 2
    # Keys that collide ("Aa" and "BB" share a Java hash): one entry finds the record for both.
    r = svc.put(IndexEntries(index_key_hashes(["T#Aa", "T#BB"]), np.array([200, 200]), np.array([2000, 2000])))
    assert r.indexed == 1 and svc.query("T", "Aa") == svc.query("T", "BB") == [200]
    svc.close()


def test_a_record_split_over_two_files_is_completed_not_repeated(tmp_path: Path) -> None:
    """A record's keys fill one file and spill into the next; re-dispatching it puts
    only what neither file holds (a put cut short by a failed file creation)."""
    svc = IndexService(tmp_path, hash_slots=8, max_entries=4)  # 3 entries a file
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    k = [f"T#k{i}" for i in range(5)]
    svc.put(IndexEntries(index_key_hashes(k[:2]), np.array([10, 20]), np.array([1000, 2000])))
    svc.put(IndexEntries(index_key_hashes(k[2:4]), np.array([30, 30]), np.array([3000, 3000])))  # k2 | k3
    assert len(svc.files) == 2
    r = svc.put(IndexEntries(index_key_hashes(k[2:]), np.array([30, 30, 30]), np.array([3000] * 3)))
    assert (r.indexed, r.skipped) == (1, 2)  # k4 only
    assert [svc.query("T", f"k{i}") for i in range(5)] == [[10], [20], [30], [30], [30]]
    svc.close()


def test_a_clean_restart_resumes_just_past_the_last_indexed_record(tmp_path: Path) -> None:
    """Two messages with one UNIQ_KEY, the last one indexed: after a clean restart the
    dispatcher re-dispatches nothing, so the unique-key query still finds both."""
    msgs = [
        Message("T", b"first", queue_id=0, unique_key="U1", keys="k"),
        Message("T", b"second", queue_id=0, unique_key="U1", keys="k"),
    ]
    with MessageStore(tmp_path, CFG) as s:
        s.append(MessageBatch.of(msgs))
        s.wait_dispatched()
        wrote = s.commitlog.wrote_offset
    for _ in range(3):
        with MessageStore(tmp_path, CFG, background_dispatch=False) as s:
            assert s.dispatcher.dispatched_records == 0 and s.dispatcher.dispatched_offset == wrote
            assert [r.body for r in s.query_by_unique_key("T", "U1", max_num=2)] == [b"second", b"first"]
            assert [r.body for r in s.query_by_key("T", "k", max_num=2)] == [b"second", b"first"]
    assert duplicates(tmp_path) == {}


def rocketmq_reindex_last_record(store: Path, cfg: StoreConfig = CFG) -> tuple[int, int]:
    """What RocketMQ (and mqstore before this fix) does on every restart: put the keys
    of the record at the last file's end offset again, straight into the file."""
    last = sorted((store / INDEX_DIR).iterdir())[-1]
    with last.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        view = IndexFileView(mm, cfg.index_hash_slots, cfg.index_max_entries)
        h = view.header
        e = view.entries()
        at = e["phy_offset"] == h.end_phy_offset
        hashes = e["key_hash"][at].astype(np.int64)
        n = view.put_hashes(hashes, np.full(len(hashes), h.end_phy_offset), np.full(len(hashes), h.end_timestamp))
        mm.flush()
    return h.end_phy_offset, n


def test_verify_reports_duplicate_entries_and_repair_removes_them(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CFG) as s:
        s.append(
            MessageBatch(
                topics="T", bodies=[b"%d" % i for i in range(8)], queue_ids=0, keys=[f"k{i} shared" for i in range(8)]
            )
        )
        s.wait_dispatched()
    assert verify_store(tmp_path).ok
    offset, n = rocketmq_reindex_last_record(tmp_path)
    assert n == 3 and len(duplicates(tmp_path)) == 3  # UNIQ_KEY, k7, shared
    report = verify_store(tmp_path)
    assert not report.ok
    (dup,) = report.of_kind("index_entry_duplicate")
    assert f"offset {offset}" in dup.detail and report.damage.index_bad
    res = repair_store(tmp_path)
    assert res.ok and res.after is not None and res.after.ok and not res.after.of_kind("index_entry_duplicate")
    assert duplicates(tmp_path) == {}
    with MessageStore(tmp_path, CFG) as s:
        assert [r.body for r in s.query_by_key("T", "shared", max_num=8)] == [b"%d" % i for i in reversed(range(8))]


def test_resume_is_at_a_record_whose_keys_may_have_spilled_into_a_lost_file(tmp_path: Path) -> None:
    """A record's keys fill the last file and spill into a next one that a crash (or
    an abnormal load deleting files past the checkpoint's index time) took away:
    dispatch resumes *at* that record, so its lost keys are indexed again (and the
    ones held are not repeated); past it only while the last file holds the whole
    record (neither full nor empty)."""
    svc = IndexService(tmp_path, hash_slots=8, max_entries=4)  # 3 entries a file
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    k = [f"T#k{i}" for i in range(4)]
    svc.put(IndexEntries(index_key_hashes(k[:1]), np.array([10]), np.array([1000])))
    assert svc.resume_offset(lambda off: 20) == 30  # the last file holds all of record 10: past it
    svc.put(IndexEntries(index_key_hashes(k[1:]), np.array([30, 30, 30]), np.array([3000] * 3)))  # k1 k2 | k3
    names = svc.files
    assert len(names) == 2
    svc.close()
    (tmp_path / INDEX_DIR / names[-1]).unlink()  # the file holding k3 is gone
    svc = IndexService(tmp_path, hash_slots=8, max_entries=4)
    svc.load(clean_shutdown=True, index_msg_timestamp=0)
    assert len(svc.files) == 1 and svc.resume_offset(lambda off: 20) == 30  # at record 30: the file is full
    r = svc.put(IndexEntries(index_key_hashes(k[1:]), np.array([30, 30, 30]), np.array([3000] * 3)))
    assert (r.indexed, r.skipped) == (1, 2)  # k3 again, k1 and k2 not repeated
    assert [svc.query("T", f"k{i}") for i in range(4)] == [[10], [30], [30], [30]]
    assert svc.resume_offset(lambda off: 20) == 50  # the new last file holds record 30's last key: past it
    svc.close()
