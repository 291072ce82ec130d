"""Issue 28 item 5: truncation to the consistent point, in-process (the crash tests
are tests/integration/test_ha_truncation_crash.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mqstore.errors import CorruptFileError
from mqstore.store import CommitLog, MessageBatch
from mqstore.store.checkpoint_file import read_checkpoint
from mqstore.store.config import STORE_TYPE_ROCKSDB
from mqstore.store.derived_offset import read_durable_offset
from mqstore.store.ha import (
    EpochCache,
    ReplicaFollower,
    next_batch,
    pending_truncation,
    request_truncation,
    truncate_store,
)
from mqstore.store.message_store import MessageStore
from tests.ha_stores import SEG, TOPIC, build_stale_tail, check_truncated, config


@pytest.mark.parametrize("store_type", [None, STORE_TYPE_ROCKSDB], ids=["files", "rocksdb"])
def test_truncate_store_cuts_the_log_epochs_and_derived_files(tmp_path: Path, store_type: str | None) -> None:
    tail = build_stale_tail(tmp_path, store_type=store_type)
    assert tail.end // SEG > tail.point // SEG + 1  # the stale tail spans segments
    report = truncate_store(tmp_path, tail.point, config(store_type))
    assert report.point == tail.point and report.epochs_dropped == [(2, tail.point)]
    assert report.deleted_segments
    check_truncated(tmp_path, tail, store_type)
    assert read_durable_offset(tmp_path) is None or read_durable_offset(tmp_path) <= tail.point


def test_the_stale_tail_never_comes_back_after_new_records(tmp_path: Path) -> None:
    tail = build_stale_tail(tmp_path)
    truncate_store(tmp_path, tail.point, config())
    EpochCache(tmp_path).append(3, tail.point)  # the new master's epoch
    with MessageStore(tmp_path, config()) as s:
        res = s.append(MessageBatch(topics=TOPIC, bodies=[b"new"] * 5, queue_ids=0))
        assert int(res.physical_offsets[0]) == tail.point
        assert int(res.queue_offsets[0]) == tail.per_queue[0]  # queue offsets continue below the point
    with CommitLog(tmp_path, config()) as cl:
        records = cl.read_range(tail.point, max_records=1000).records
        assert [r.body for r in records] == [b"new"] * 5 and cl.wrote_offset == int(res.end_offset)


def test_an_open_finishes_a_requested_truncation(tmp_path: Path) -> None:
    tail = build_stale_tail(tmp_path)
    request_truncation(tmp_path, tail.end)  # a higher point later: the lower one wins
    request_truncation(tmp_path, tail.point)
    request_truncation(tmp_path, tail.end)
    assert pending_truncation(tmp_path) == tail.point
    with CommitLog(tmp_path, config()) as cl:  # the commitlog alone: the cut is done before recovery
        assert cl.truncation.point == tail.point and cl.wrote_offset == tail.point
    assert pending_truncation(tmp_path) is None
    cp = read_checkpoint(tmp_path)
    assert cp.confirm_phy_offset <= tail.point and cp.master_flushed_offset <= tail.point
    check_truncated(tmp_path, tail)  # the builders cut their files at the next open


def test_an_unreadable_marker_stops_the_open(tmp_path: Path) -> None:
    tail = build_stale_tail(tmp_path, kept_batches=2, stale_batches=2)
    (tmp_path / "truncation.json").write_bytes(b"{garbage")
    with pytest.raises(CorruptFileError, match="truncation marker"):
        CommitLog(tmp_path, config())
    (tmp_path / "truncation.json").unlink()
    with CommitLog(tmp_path, config()) as cl:
        assert cl.wrote_offset == tail.end


@pytest.mark.slow  # (about 3 s: three stores with sync flush)
def test_a_follower_with_a_stale_tail_follows_a_new_master(tmp_path: Path) -> None:
    """The whole path: the old master's stale epoch 2 tail, a new master that took
    epoch 3 at the point; the follower finds the point, truncates, follows, and both
    logs are byte-identical."""
    tail = build_stale_tail(tmp_path / "old")
    master_dir = tmp_path / "new"
    shutil.copytree(tmp_path / "old", master_dir, ignore=shutil.ignore_patterns("lock"))
    truncate_store(master_dir, tail.point, config())  # the new master never had epoch 2
    me = EpochCache(master_dir)
    me.append(3, tail.point)
    with MessageStore(master_dir, config()) as m:
        for i in range(4):
            m.append(MessageBatch(topics=TOPIC, bodies=[b"m3-%d" % i] * 30, queue_ids=1))
        master_end = m.commitlog.wrote_offset
    with CommitLog(tmp_path / "old", config()) as f:
        point = ReplicaFollower(f, EpochCache(tmp_path / "old")).consistent_point(me.entries, master_end)
    assert point == tail.point
    truncate_store(tmp_path / "old", point, config())
    with CommitLog(master_dir, config()) as m, CommitLog(tmp_path / "old", config()) as f:
        fol = ReplicaFollower(f, EpochCache(tmp_path / "old"))
        while (b := next_batch(m, me, fol.end, 16384)) is not None:
            fol.append(b.offset, b.data, epoch=b.epoch, epoch_start=b.epoch_start)
        assert f.wrote_offset == m.wrote_offset
        assert all(m.read_log_bytes(o, SEG) == f.read_log_bytes(o, SEG) for o in range(0, m.wrote_offset, SEG))
        assert EpochCache(tmp_path / "old").entries == me.entries
